package blueprint

import (
	"reflect"
	"testing"

	"go.yaml.in/yaml/v3"
)

// FuzzParse parses any blueprint: no panic; a blueprint that parses has
// steps of exactly one kind each and survives a marshal/parse round trip.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"base: debian-bookworm\n",
		"base: debian-bookworm\nvcpus: 2\nmemory_mib: 1024\nsteps:\n  - run: apt-get install -y jq\n  - copy: {src: ./app, dest: /opt/app}\n  - env: {FOO: bar, N: 1}\n  - workdir: /opt/app\n",
		"template: t\nsteps:\n  - run: x\n    env: {A: b}\n",
		"base: debian-bookworm\nsteps:\n  - env: {}\n",
		"base: debian-bookworm\nsteps:\n  - env: {\"a b\": c}\n",
		"base: debian-bookworm\nsteps:\n  - copy: {src: a, dest: rel}\n",
		"base: debian-bookworm\nsteps: [&a {run: x}, *a]\n",
		"base: debian-bookworm\nextra: 1\n",
		"- a\n- b\n",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		bp, err := Parse(b)
		if err != nil {
			return
		}
		for i, s := range bp.Steps {
			if s.Kind() == "" {
				t.Fatalf("step %d has no single kind: %+v", i+1, s)
			}
			_ = s.String()
		}
		out, err := yaml.Marshal(bp)
		if err != nil {
			t.Fatalf("marshal %+v: %v", bp, err)
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("parse of marshalled %q: %v", out, err)
		}
		if !reflect.DeepEqual(bp, again) {
			t.Fatalf("round trip: %+v became %+v", bp, again)
		}
	})
}
