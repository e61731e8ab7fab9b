package main

import (
	"testing"

	"github.com/agentbox/agentbox/internal/deptest"
)

// TestDeps keeps hostd from linking what it does not use: the daemon serves
// the API and links its Go client and the Dockerfile parser only through
// the template builder (POST /v1/templates/build runs the blueprint and
// Dockerfile engine, which drives hostd's own API), and no test code.
func TestDeps(t *testing.T) {
	deptest.Checker{
		Pkg: ".",
		BadDeps: map[string]string{
			"github.com/agentbox/agentbox/client/...": "hostd serves the API; the types it shares with the client are in apitypes and images/imageconfig",
			"github.com/moby/buildkit/...":            "Dockerfiles are parsed by client/dockerfile, which only the template builder uses",
			"testing":                                 "test code does not belong in the daemon (test kits are imported from _test.go files only)",
		},
		ImportedBy: map[string][]string{
			// The template builder (internal/templatebuild, wired in by
			// cmd/internal/hostdflags as hostd.Config.Builds) runs the
			// blueprint and Dockerfile engine against hostd's own API; the
			// hostd package itself never imports the client
			// (internal/layers checks that).
			"github.com/agentbox/agentbox/client/...": {"github.com/agentbox/agentbox/internal/templatebuild", "github.com/agentbox/agentbox/client/..."},
			"github.com/moby/buildkit/...":            {"github.com/agentbox/agentbox/client/dockerfile", "github.com/moby/buildkit/..."},
			// go-abnf, which prometheus/common/expfmt's OpenMetrics parser
			// uses (linked through promhttp, hostd/metrics), has fuzzing
			// helpers in its non-test files. Dropping it means dropping the
			// Prometheus client library for a hand-written exposition.
			"testing": {"github.com/pandatix/go-abnf"},
		},
	}.Check(t)
}
