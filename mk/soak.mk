# Load and soak (ci/soak), included by the top-level Makefile. `make soak`
# is the full run (minutes); `make soak-short` checks every part in about
# a minute or two with 2 sandboxes. Both print one table.

# Keep the including Makefile's default goal: this file is read first.
soak_mk_default_goal := $(.DEFAULT_GOAL)

SOAK_SHORT_FLAGS ?= -sandboxes 2 -clients 2 -duration 5s -cycles 3 -files 20 -probe 3s -abuse-for 3s -output-mib 20 -list-files 2000

.PHONY: soak soak-short

soak: assets build
	go run ./ci/soak -hostd $(BIN)/hostd $(SOAK_FLAGS)

soak-short: assets build
	go run ./ci/soak -hostd $(BIN)/hostd $(SOAK_SHORT_FLAGS)

.DEFAULT_GOAL := $(soak_mk_default_goal)
