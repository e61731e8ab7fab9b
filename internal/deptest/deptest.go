// Package deptest checks what a binary links, for tests, as tailscale's
// tstest/deptest does for cmd/tailscaled: a binary's deps_test.go names the
// packages it must not link (BadDeps) or the only ones it may (Allow), and
// Check runs `go list -deps` on its main package, so that a new dependency
// fails `go test ./...` with a line that says who brought it in.
//
// A pattern is an import path, which matches that package, or a path
// ending in "/...", which matches the path and every package below it.
package deptest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
)

// Checker describes what one binary may link.
type Checker struct {
	// Pkg is the binary's main package, as `go list` takes it ("." from
	// the binary's own test).
	Pkg string
	// Env is added to the go command's environment, so that the graph is
	// the one the binary is built with (e.g. CGO_ENABLED=0).
	Env []string
	// BadDeps maps a pattern the binary must not link to why.
	BadDeps map[string]string
	// ImportedBy maps a pattern of BadDeps to packages that may import it
	// anyway (each a pattern): such a dependency is reported only when some
	// other package imports it. Each entry needs a comment saying why.
	ImportedBy map[string][]string
	// Allow, when set, lists the patterns that every dependency outside the
	// standard library must match: anything else is new, and fails until
	// it is added deliberately.
	Allow []string
}

// Package is one package of the binary's graph.
type Package struct {
	Path     string
	Standard bool
	Imports  []string
}

// Check fails t for each dependency of c.Pkg that c forbids.
func (c Checker) Check(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	pkgs, err := List(c.Pkg, c.Env)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 2 {
		t.Fatalf("go list -deps %s found %d packages", c.Pkg, len(pkgs))
	}
	c.Pkg = pkgs[len(pkgs)-1].Path // go list -deps lists a package after its deps
	for _, line := range c.Problems(pkgs) {
		t.Error(line)
	}
}

// List returns the packages that pkg links, pkg included, from `go list
// -deps` run with env added to the environment.
func List(pkg string, env []string) ([]Package, error) {
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}\t{{.Standard}}\t{{join .Imports \" \"}}", pkg)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -deps %s: %v: %s", pkg, err, stderr.String())
	}
	var pkgs []Package
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) != 3 {
			return nil, fmt.Errorf("go list -deps %s: unexpected line %q", pkg, sc.Text())
		}
		pkgs = append(pkgs, Package{Path: f[0], Standard: f[1] == "true", Imports: strings.Fields(f[2])})
	}
	return pkgs, sc.Err()
}

// Problems returns one line per dependency in pkgs that c forbids, in the
// order of pkgs.
func (c Checker) Problems(pkgs []Package) []string {
	importers := map[string][]string{}
	for _, p := range pkgs {
		for _, imp := range p.Imports {
			importers[imp] = append(importers[imp], p.Path)
		}
	}
	var bad []string
	for _, p := range pkgs {
		by := importers[p.Path]
		sort.Strings(by)
		if pat, why, ok := c.badDep(p.Path); ok {
			others := slices.DeleteFunc(slices.Clone(by), func(i string) bool { return matchAny(c.ImportedBy[pat], i) })
			if len(others) > 0 || len(by) == 0 {
				bad = append(bad, fmt.Sprintf("%s links %s (%s): %s", c.Pkg, p.Path, importedBy(others), why))
			}
			continue
		}
		if len(c.Allow) > 0 && !p.Standard && !matchAny(c.Allow, p.Path) {
			bad = append(bad, fmt.Sprintf("%s links %s (%s), which its allow list does not have: if it is meant, add it to Allow in the binary's deps_test.go, deliberately", c.Pkg, p.Path, importedBy(by)))
		}
	}
	return bad
}

func importedBy(pkgs []string) string {
	if len(pkgs) == 0 {
		return "the main package"
	}
	return "imported by " + strings.Join(pkgs, ", ")
}

// badDep returns the pattern of BadDeps that path matches, and why.
func (c Checker) badDep(path string) (pattern, why string, ok bool) {
	for _, pat := range sortedKeys(c.BadDeps) {
		if Match(pat, path) {
			return pat, c.BadDeps[pat], true
		}
	}
	return "", "", false
}

// Match reports whether path matches pattern (see the package doc).
func Match(pattern, path string) bool {
	if p, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == p || strings.HasPrefix(path, p+"/")
	}
	return path == pattern
}

func matchAny(patterns []string, path string) bool {
	return slices.ContainsFunc(patterns, func(p string) bool { return Match(p, path) })
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
