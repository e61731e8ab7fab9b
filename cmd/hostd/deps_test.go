package main

import (
	"testing"

	"github.com/agentbox/agentbox/internal/deptest"
)

// TestDeps keeps hostd from linking what it does not use: the daemon serves
// the API and links neither its Go client nor the Dockerfile parser behind
// it, and no test code.
func TestDeps(t *testing.T) {
	deptest.Checker{
		Pkg: ".",
		BadDeps: map[string]string{
			"github.com/agentbox/agentbox/client/...": "hostd serves the API; the types it shares with the client are in apitypes and images/imageconfig",
			"github.com/moby/buildkit/...":            "Dockerfiles are parsed by the client (client/dockerfile), not by hostd",
			"testing":                                 "test code does not belong in the daemon (test kits are imported from _test.go files only)",
		},
		ImportedBy: map[string][]string{
			// go-abnf, which prometheus/common/expfmt's OpenMetrics parser
			// uses (linked through promhttp, hostd/metrics), has fuzzing
			// helpers in its non-test files. Dropping it means dropping the
			// Prometheus client library for a hand-written exposition.
			"testing": {"github.com/pandatix/go-abnf"},
		},
	}.Check(t)
}
