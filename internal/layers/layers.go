// Package layers states the import rules between the project's rooms and
// checks a dependency graph against them (DESIGN §2 "Layering that a test
// keeps true"). Its test runs the check on the real graph from `go list`.
package layers

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Module is the project's module path.
const Module = "github.com/agentbox/agentbox"

// Rule forbids packages under From (with their tests when Tests is set)
// to depend, directly or not, on anything under one of Not.
type Rule struct {
	// From is a directory of the module ("" is all of it).
	From  string
	Not   []string
	Tests bool
	// Except lists packages under From (with what is below them) that the
	// rule does not check.
	Except []string
	Why    string
}

// TestKits are the packages made for tests: fakes, servers, helpers and
// suites that tests share. Only tests import them (the last of Rules): the
// _test.go files, other kits, and the ci/ programs that measure and soak a
// real hostd and are not shipped (ci/bench runs the fake driver's floors and
// the egress and S3 upstreams of nettest and s3test; ci/soak looks for
// leaks with leakcheck; ci/fleet, behind `make fleet`, starts a fleet on one
// machine with fleettest). A package whose name ends in "test", or whose
// non-test files import testing, is a kit and must be listed here
// (TestTestKitsListed).
var TestKits = []string{
	"fleet/gateway/gatewaytest",
	"fleet/store/storetest",
	"hostd/api/apitest",
	"hostd/api/blueprinttest",
	"hostd/sandbox/sandboxtest",
	"internal/deptest",
	"internal/fleettest",
	"internal/gittest",
	"internal/hostdtest",
	"internal/leakcheck",
	"internal/logtest",
	"internal/nettest",
	"internal/s3test",
	"internal/testwheel",
	"internal/waitfor",
	"sdk/sdktest",
	"vmm/vmmtest",
}

// Rules are the project's layering rules, as paths relative to Module.
var Rules = []Rule{
	{From: "guestinit", Not: []string{"vmm", "hostd", "snapshot", "disk", "client"}, Tests: true,
		Why: "the guest imports nothing of the host"},
	{From: "cmd/guestinit", Not: []string{"vmm", "hostd", "snapshot", "disk", "client"}, Tests: true,
		Why: "the guest imports nothing of the host"},
	{From: "agent", Not: []string{"vmm", "hostd", "guestinit", "client"},
		Why: "the guest protocol is shared by both sides and depends on neither"},
	{From: "vmm", Not: []string{"hostd", "snapshot", "client"}, Tests: true,
		Why: "drivers import nothing of hostd"},
	{From: "vmm", Not: []string{"guestinit"}, Except: []string{"vmm/vmmtest"},
		Why: "drivers import nothing of the guest (vmm/vmmtest's fake driver serves the real agent in-process, for tests)"},
	{From: "snapshot", Not: []string{"hostd", "client"}, Tests: true,
		Why: "the snapshot engine is driven through narrow interfaces, not hostd"},
	{From: "client", Not: []string{"hostd", "vmm", "guestinit", "agent", "snapshot", "disk"},
		Why: "the clients speak HTTP only"},
	{From: "apitypes", Not: []string{"hostd", "client", "vmm", "guestinit", "agent", "snapshot", "disk"}, Tests: true,
		Why: "the API's types are shared by the server and the client and depend on neither"},
	{From: "fleet", Not: []string{"hostd", "client", "vmm", "guestinit", "agent", "snapshot", "disk"},
		Why: "the control plane reaches hosts over their HTTP API, never by importing hostd (its tests start real hostds)"},
	{From: "hostd", Not: []string{"client"},
		Why: "hostd serves the API and does not link its client: what they share is in apitypes and images/imageconfig (hostd's tests drive it with the client)"},
	{From: "", Not: TestKits, Except: append(slices.Clone(TestKits), "ci/bench", "ci/soak", "ci/fleet"),
		Why: "test kits are imported from _test.go files only (and by other kits, ci/bench, ci/soak and ci/fleet)"},
}

// Graph maps an import path to the import paths it depends on.
type Graph map[string][]string

// under reports whether pkg is rel or a package below it; every package
// of the module is under "".
func under(pkg, rel string) bool {
	p := Module
	if rel != "" {
		p += "/" + rel
	}
	return pkg == p || strings.HasPrefix(pkg, p+"/")
}

// Check returns one line per broken rule: the package, what it reaches and
// why that is not allowed. deps holds the non-test graph; testDeps the graph
// with each package's tests.
func Check(rules []Rule, deps, testDeps Graph) []string {
	var bad []string
	for _, r := range rules {
		g := deps
		if r.Tests {
			g = testDeps
		}
		for _, pkg := range sortedKeys(g) {
			if !under(pkg, r.From) || slices.ContainsFunc(r.Except, func(e string) bool { return under(pkg, e) }) {
				continue
			}
			for _, d := range g[pkg] {
				for _, not := range r.Not {
					if under(d, not) {
						bad = append(bad, fmt.Sprintf("%s reaches %s: %s", pkg, d, r.Why))
					}
				}
			}
		}
	}
	return slices.Compact(bad)
}

func sortedKeys(g Graph) []string {
	keys := make([]string, 0, len(g))
	for k := range g {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
