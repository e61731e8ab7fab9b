package layers

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// goList returns the dependency graph of every package in the module, with
// or without each package's test imports.
func goList(t *testing.T, tests bool) Graph {
	t.Helper()
	args := []string{"list", "-f", "{{.ImportPath}}\t{{join .Deps \" \"}}"}
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
		m("guestinit"):     {m("agent/channel"), "fmt"},
		m("client"):        {m("hostd/sandbox")},
		m("vmm/qemu"):      {m("agent/channel")},
		m("clientele"):     {m("hostd/api")}, // not under client/
		m("vmm/vmmtest"):   {m("agent/agentclient")},
		m("agent/channel"): {"net"},
		m("cmd/guestinit"): {m("guestinit")},
	}
	test := Graph{}
	for k, v := range deps {
		test[k] = v
	}
	test[m("guestinit")] = append(test[m("guestinit")], m("vmm"))
	got := Check(Rules, deps, test)
	want := []string{
		m("guestinit") + " reaches " + m("vmm") + ": the guest imports nothing of the host",
		m("client") + " reaches " + m("hostd/sandbox") + ": the clients speak HTTP only",
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
