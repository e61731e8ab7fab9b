package layers

import (
	"bufio"
	"bytes"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"
)

// goList returns the dependency graph of every package in the module, with
// or without each package's test imports.
func goList(t *testing.T, tests bool) Graph {
	t.Helper()
	return goListField(t, "Deps", tests)
}

// goListField returns field (Deps or Imports) of every package in the
// module, with or without each package's tests.
func goListField(t *testing.T, field string, tests bool) Graph {
	t.Helper()
	args := []string{"list", "-f", "{{.ImportPath}}\t{{join ." + field + " \" \"}}"}
	if tests {
		args = append(args, "-test")
	}
	cmd := exec.Command("go", append(args, Module+"/...")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, stderr.String())
	}
	g := Graph{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		path, deps, _ := strings.Cut(sc.Text(), "\t")
		// "p [p.test]", "p_test [p.test]" and "p.test" are test variants
		// of p; fold them onto p.
		pkg, _, _ := strings.Cut(path, " ")
		pkg = strings.TrimSuffix(strings.TrimSuffix(pkg, ".test"), "_test")
		g[pkg] = append(g[pkg], strings.Fields(deps)...)
	}
	return g
}

func TestLayering(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	deps, testDeps := goList(t, false), goList(t, true)
	if len(deps) < 20 {
		t.Fatalf("go list found only %d packages", len(deps))
	}
	for _, line := range Check(Rules, deps, testDeps) {
		t.Error(line)
	}
}

func TestCheckFindsPlantedViolation(t *testing.T) {
	m := func(s string) string { return Module + "/" + s }
	deps := Graph{
		m("guestinit"):               {m("agent/channel"), "fmt"},
		m("client"):                  {m("hostd/sandbox")},
		m("vmm/qemu"):                {m("agent/channel")},
		m("clientele"):               {m("hostd/api")}, // not under client/
		m("vmm/vmmtest"):             {m("agent/agentclient")},
		m("agent/channel"):           {"net"},
		m("cmd/guestinit"):           {m("guestinit")},
		m("hostd/api"):               {m("client/dockerfile")},
		m("hostd/api/blueprinttest"): {m("hostd/api/apitest")}, // a kit may use a kit
		m("ci/bench"):                {m("vmm/vmmtest")},
		m("hostd/sandbox"):           {m("vmm/vmmtest")},
	}
	test := Graph{}
	for k, v := range deps {
		test[k] = v
	}
	test[m("guestinit")] = append(test[m("guestinit")], m("vmm"))
	test[m("hostd")] = []string{m("client"), m("internal/hostdtest")} // tests may
	got := Check(Rules, deps, test)
	want := []string{
		m("guestinit") + " reaches " + m("vmm") + ": the guest imports nothing of the host",
		m("client") + " reaches " + m("hostd/sandbox") + ": the clients speak HTTP only",
		m("hostd/api") + " reaches " + m("client/dockerfile") + ": hostd serves the API and does not link its client: what they share is in apitypes and images/imageconfig (hostd's tests drive it with the client)",
		m("hostd/sandbox") + " reaches " + m("vmm/vmmtest") + ": test kits are imported from _test.go files only (and by other kits, ci/bench, ci/soak and ci/fleet)",
	}
	if len(got) != len(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("got %q, want %q", got[i], want[i])
		}
	}
}

// TestVMMStandardLibraryOnly keeps the vmm package (the interface every
// backend implements) free of dependencies beyond the standard library.
func TestVMMStandardLibraryOnly(t *testing.T) {
	for _, d := range goList(t, false)[Module+"/vmm"] {
		if first, _, _ := strings.Cut(d, "/"); strings.Contains(first, ".") {
			t.Errorf("vmm depends on %s", d)
		}
	}
}

// TestTestKitsListed keeps TestKits complete: a package named like a kit
// ("...test") or importing testing outside its tests is a kit, so the rule
// that only tests import kits covers it; and every listed kit exists.
func TestTestKitsListed(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	imports := goListField(t, "Imports", false)
	for _, pkg := range sortedKeys(imports) {
		rel := strings.TrimPrefix(pkg, Module+"/")
		if slices.Contains(TestKits, rel) {
			continue
		}
		if strings.HasSuffix(path.Base(rel), "test") {
			t.Errorf("%s is named like a test kit: list it in TestKits (or rename it)", rel)
		}
		if slices.Contains(imports[pkg], "testing") {
			t.Errorf("%s imports testing outside its tests: a test kit belongs in TestKits", rel)
		}
	}
	for _, kit := range TestKits {
		if _, ok := imports[Module+"/"+kit]; !ok {
			t.Errorf("TestKits lists %s, which is not a package of the module", kit)
		}
	}
}
