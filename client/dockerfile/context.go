package dockerfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"

	"github.com/agentbox/agentbox/client/blueprint"
)

// buildContext is the build context directory and its .dockerignore.
type buildContext struct {
	dir    string
	ignore *patternmatcher.PatternMatcher // nil without a .dockerignore
}

func openContext(dir string) (*buildContext, error) {
	if dir == "" {
		return nil, errors.New("dockerfile: no build context")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("dockerfile: context: %w", err)
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("dockerfile: context %s is not a directory", dir)
	}
	c := &buildContext{dir: abs}
	f, err := os.Open(filepath.Join(abs, ".dockerignore"))
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("dockerfile: %w", err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("dockerfile: .dockerignore: %w", err)
	}
	if c.ignore, err = patternmatcher.New(patterns); err != nil {
		return nil, fmt.Errorf("dockerfile: .dockerignore: %w", err)
	}
	return c, nil
}

// sources resolves COPY sources (globs expanded) to paths relative to the
// context, refusing any outside it.
func (c *buildContext) sources(srcs []string) ([]string, error) {
	var out []string
	for _, s := range srcs {
		p := filepath.Join(c.dir, filepath.FromSlash(s)) // Join cleans: "/x" and "../x" stay checked below
		rel, err := filepath.Rel(c.dir, p)
		if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return nil, fmt.Errorf("source %s is outside the build context", s)
		}
		if !strings.ContainsAny(s, "*?[") {
			out = append(out, filepath.ToSlash(rel))
			continue
		}
		matches, err := filepath.Glob(p)
		if err != nil {
			return nil, fmt.Errorf("source %s: %w", s, err)
		}
		if len(matches) == 0 {
			return nil, fmt.Errorf("source %s matches no file in the build context", s)
		}
		for _, m := range matches {
			rel, _ := filepath.Rel(c.dir, m)
			if c.ignore != nil {
				if ignored, err := c.ignore.MatchesOrParentMatches(filepath.ToSlash(rel)); err != nil || ignored {
					continue
				}
			}
			out = append(out, filepath.ToSlash(rel))
		}
	}
	return out, nil
}

func (t *translator) copy(c *instructions.CopyCommand) error {
	for flag, set := range map[string]bool{"--from": c.From != "", "--chown": c.Chown != "", "--chmod": c.Chmod != "",
		"--link": c.Link, "--exclude": len(c.ExcludePatterns) > 0, "--parents": c.Parents} {
		if set {
			return fmt.Errorf("COPY %s is not supported", flag)
		}
	}
	return t.copySteps(c.String(), c.SourcesAndDest)
}

func (t *translator) add(c *instructions.AddCommand) error {
	for flag, set := range map[string]bool{"--chown": c.Chown != "", "--chmod": c.Chmod != "", "--link": c.Link,
		"--exclude": len(c.ExcludePatterns) > 0, "--keep-git-dir": c.KeepGitDir != nil, "--checksum": c.Checksum != "",
		"--unpack": c.Unpack != nil} {
		if set {
			return fmt.Errorf("ADD %s is not supported", flag)
		}
	}
	for _, s := range c.SourcePaths {
		if isURL(s) {
			return fmt.Errorf("ADD of a URL (%s) is not supported: download it in a RUN step", s)
		}
		p := filepath.Join(t.ctx.dir, filepath.FromSlash(s))
		if isArchive(p) {
			return fmt.Errorf("ADD of a local archive (%s) is not supported: COPY it and unpack it in a RUN step", s)
		}
	}
	return t.copySteps(c.String(), c.SourcesAndDest)
}

// copySteps adds one copy step per source (a glob's matches each count).
func (t *translator) copySteps(label string, sd instructions.SourcesAndDest) error {
	if len(sd.SourceContents) > 0 {
		return errors.New("COPY or ADD with a heredoc is not supported")
	}
	srcs, err := t.ctx.sources(sd.SourcePaths)
	if err != nil {
		return err
	}
	dest := t.abs(sd.DestPath)
	if strings.HasSuffix(sd.DestPath, "/") || sd.DestPath == "." {
		dest += "/"
	}
	if len(srcs) > 1 && !strings.HasSuffix(dest, "/") {
		return fmt.Errorf("copying %d sources: the destination %s must end with /", len(srcs), sd.DestPath)
	}
	for _, s := range srcs {
		l := label
		if len(srcs) > 1 {
			l += " (" + s + ")"
		}
		// A file goes into dest when it ends in "/", a directory's
		// contents always go into dest (blueprint's copy rules).
		t.steps = append(t.steps, blueprint.Step{Copy: &blueprint.Copy{Src: s, Dest: dest, Ignore: t.ctx.ignore}, Label: l})
	}
	return nil
}

func isURL(s string) bool {
	for _, p := range []string{"http://", "https://", "git@", "git://"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// isArchive reports whether the file at p starts like an archive that ADD
// would unpack: gzip, bzip2, xz, zstd, or a tar header. (A small sniff of
// magic numbers, hand-rolled.)
func isArchive(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, 512)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	for _, magic := range [][]byte{{0x1f, 0x8b}, []byte("BZh"), {0xfd, '7', 'z', 'X', 'Z', 0}, {0x28, 0xb5, 0x2f, 0xfd}} {
		if bytes.HasPrefix(head, magic) {
			return true
		}
	}
	return n >= 262 && bytes.Equal(head[257:262], []byte("ustar"))
}
