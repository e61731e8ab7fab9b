package dockerfile

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/client/blueprint"
)

// FuzzTranslate parses and translates any Dockerfile against a real build
// context: no panic, and a translation that succeeds is a blueprint that
// validates (so Build never fails late on a step the translation made)
// whose copy sources stay inside the context.
func FuzzTranslate(f *testing.F) {
	ctx := testContext(f)
	for _, s := range []string{
		"FROM debian-bookworm\nRUN echo hi\n",
		"ARG V=1\nFROM base:debian-bookworm\nARG X\nENV A=$V B=\"two words\"\nWORKDIR app\nCOPY app/ /opt/app/\nADD data.tgz /d\nUSER nobody\nCMD [\"sh\"]\nEXPOSE 80/tcp\nLABEL k=v\n",
		"FROM x\nCOPY ../../etc/passwd /p\n",
		"FROM x\nCOPY /etc/passwd /p\n",
		"FROM x\nCOPY --from=y a b\n",
		"FROM x\nENV a-b=1\n",
		"FROM x\nENV =1\n",
		"FROM x\nRUN [\"\"]\n",
		"FROM x\nWORKDIR $NOPE\n",
		"FROM x\nRUN <<EOF\necho\nEOF\n",
		"# escape=`\nFROM x\nRUN a `\n b\n",
		"FROM a\nFROM b\n",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		df, err := Parse(src, map[string]string{"X": "arg"})
		if err != nil {
			return
		}
		tr, err := df.Translate(ctx, Config{})
		if err != nil {
			return
		}
		bp := blueprint.Blueprint{Base: blueprint.Bases[0], Steps: tr.Steps}
		if err := bp.Validate(); err != nil {
			t.Fatalf("translation of %q does not validate: %v", src, err)
		}
		for _, s := range tr.Steps {
			if s.Copy == nil {
				continue
			}
			src := s.Copy.Src
			if !filepath.IsAbs(src) {
				src = filepath.Join(ctx, src)
			}
			if rel, err := filepath.Rel(ctx, src); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
				t.Fatalf("copy source %q leaves the context %s", s.Copy.Src, ctx)
			}
		}
	})
}
