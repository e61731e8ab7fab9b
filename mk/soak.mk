# Load and soak (ci/soak), included by the top-level Makefile. `make soak`
# is the full run (minutes); `make soak-short` checks every part in about
# a few minutes with 2 sandboxes (3 hostd kill -9 / restart cycles: at
# fault points in an exec and a create, and mid-stream). Both print one
# table and fail when a goal row (errors, lost sandboxes, leaks,
# mismatches) is not met; no row fails on a timing.

# Keep the including Makefile's default goal: this file is read first.
soak_mk_default_goal := $(.DEFAULT_GOAL)

SOAK_SHORT_FLAGS ?= -sandboxes 2 -clients 2 -duration 5s -cycles 3 -files 20 -probe 3s -abuse-for 3s -output-mib 20 -list-files 2000 -restarts 3

.PHONY: soak soak-short

soak: assets build
	go run ./ci/soak -hostd $(BIN)/hostd $(SOAK_FLAGS)

soak-short: assets build
	go run ./ci/soak -hostd $(BIN)/hostd $(SOAK_SHORT_FLAGS)

.DEFAULT_GOAL := $(soak_mk_default_goal)
