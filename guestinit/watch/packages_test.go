package watch

import (
	"fmt"
	"strings"
	"testing"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

func TestParsePipMetadata(t *testing.T) {
	tests := []struct {
		name, in string
		want     pkgID
	}{
		{"plain", "Metadata-Version: 2.1\nName: demo\nVersion: 0.1\n", pkgID{"demo", "0.1"}},
		{"body ignored", "Name: a\nVersion: 1\n\nName: b\nVersion: 2\n", pkgID{"a", "1"}},
		{"spaces and case", "name:  Foo-Bar \nVERSION:2.0.post1\nSummary: x: y\n", pkgID{"Foo-Bar", "2.0.post1"}},
		{"empty", "", pkgID{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parsePipMetadata(strings.NewReader(tc.in))
			if err != nil || got != tc.want {
				t.Errorf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestParseNpmManifest(t *testing.T) {
	got, err := parseNpmManifest(strings.NewReader(`{"name":"@acme/x","version":"1.2.3","dependencies":{"y":"^1"}}`))
	if want := (pkgID{"@acme/x", "1.2.3"}); err != nil || got != want {
		t.Errorf("got %v, %v; want %v", got, err, want)
	}
	if _, err := parseNpmManifest(strings.NewReader(`{"name":`)); err == nil {
		t.Error("got no error for truncated JSON")
	}
}

func TestPathMatchers(t *testing.T) {
	tests := []struct {
		path       string
		npm, pipDi bool
	}{
		{"/app/node_modules/left-pad/package.json", true, false},
		{"/app/node_modules/@acme/x/package.json", true, false},
		{"/app/node_modules/a/node_modules/b/package.json", true, false},
		{"/app/node_modules/a/lib/package.json", false, false},
		{"/app/node_modules/@acme/package.json", false, false},
		{"/app/package.json", false, false},
		{"/usr/lib/python3/dist-packages/demo-0.1.dist-info", false, true},
		{"/venv/lib/python3.11/site-packages/demo-0.1.dist-info", false, true},
		{"/tmp/demo-0.1.dist-info", false, false},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			if got := isNpmManifest(tc.path); got != tc.npm {
				t.Errorf("isNpmManifest: got %v, want %v", got, tc.npm)
			}
			if got := isDistInfoDir(tc.path); got != tc.pipDi {
				t.Errorf("isDistInfoDir: got %v, want %v", got, tc.pipDi)
			}
		})
	}
	if got := npmNameFromPath("/a/node_modules/@s/n/package.json"); got != "@s/n" {
		t.Errorf("npmNameFromPath: got %q, want @s/n", got)
	}
	if got := distInfoName("/x/site-packages/foo_bar-1.0rc1.dist-info"); got != (pkgID{"foo_bar", "1.0rc1"}) {
		t.Errorf("distInfoName: got %v", got)
	}
}

const dpkgStatus = `Package: bash
Status: install ok installed
Priority: required
Version: 5.2.15-2+b2
Description: GNU Bourne Again SHell
 Bash is an sh-compatible command language interpreter.
 Version: 9 (a continuation line, not a field)

Package: curl
Status: install ok installed
Version: 7.88.1-10

Package: old-conf
Status: deinstall ok config-files
Version: 1.0

Package: libfoo
Status: install ok unpacked
Version: 2.0
`

func TestParseDpkgStatus(t *testing.T) {
	got, err := parseDpkgStatus(strings.NewReader(dpkgStatus))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]dpkgEntry{
		"bash":     {"5.2.15-2+b2", "installed"},
		"curl":     {"7.88.1-10", "installed"},
		"old-conf": {"1.0", "config-files"},
		"libfoo":   {"2.0", "unpacked"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", got, want)
	}
	// libfoo is being upgraded from 1.0: it keeps 1.0 until configured.
	inst := installedVersions(got, map[string]string{"libfoo": "1.0", "old-conf": "1.0"})
	if want := map[string]string{"bash": "5.2.15-2+b2", "curl": "7.88.1-10", "libfoo": "1.0"}; fmt.Sprint(inst) != fmt.Sprint(want) {
		t.Errorf("installed: got %v, want %v", inst, want)
	}
}

func TestDiffDpkg(t *testing.T) {
	old := map[string]string{"bash": "5.2", "curl": "7.88", "gone": "1"}
	cur := map[string]string{"bash": "5.2", "curl": "7.89", "jq": "1.6"}
	var got []string
	for _, e := range diffDpkg(old, cur, "/var/lib/dpkg/status") {
		if e.Manager != "dpkg" || e.Path != "/var/lib/dpkg/status" {
			t.Errorf("got manager %q path %q", e.Manager, e.Path)
		}
		got = append(got, fmt.Sprintf("%s %s %s %s", e.Action, e.Name, e.Version, e.OldVersion))
	}
	want := []string{"upgraded curl 7.89 7.88", "removed gone 1 ", "installed jq 1.6 "}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got %q, want %q", got, want)
	}
	if d := diffDpkg(cur, cur, ""); len(d) != 0 {
		t.Errorf("no change: got %v", d)
	}
}

func TestDetectorNpmUpgradeAndRemove(t *testing.T) {
	d := &detector{pip: map[string]pkgID{}, npm: map[string]pkgID{"/n/node_modules/x/package.json": {"x", "1.0"}}}
	got := d.observe(&agentv1.FileEvent{Op: opDeleted, Path: "/n/node_modules/x/package.json"})
	if len(got) != 1 || got[0].Action != actionRemoved || got[0].Name != "x" || got[0].Version != "1.0" {
		t.Errorf("got %v, want removed x 1.0", got)
	}
	// pip's uninstall moves the dist-info dir aside before deleting it.
	d.pip["/s/site-packages/demo-0.1.dist-info"] = pkgID{"demo", "0.1"}
	got = d.observe(&agentv1.FileEvent{Op: opRenamed, Dir: true, OldPath: "/s/site-packages/demo-0.1.dist-info", Path: "/s/site-packages/~emo-0.1.dist-info"})
	if len(got) != 1 || got[0].Action != actionRemoved || got[0].Name != "demo" {
		t.Errorf("got %v, want removed demo", got)
	}
}
