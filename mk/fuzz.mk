# Fuzzing, included by the top-level Makefile. Every parser of untrusted
# bytes has a native Go fuzz target (func FuzzXxx); their seed corpora
# (testdata/fuzz/FuzzXxx/ and f.Add) run as plain tests in `go test`, so
# test-unit covers them. `make fuzz` fuzzes each target for FUZZTIME, one
# at a time (ci/fuzz.sh); `make fuzz-short` is CI's short pass.
fuzz_mk_default_goal := $(.DEFAULT_GOAL)

FUZZTIME ?= 30s
FUZZPARALLEL ?= 1
# The short pass counts executions, not seconds: a -fuzztime duration
# shorter than the baseline coverage run of a corpus ends in Go's
# "context deadline exceeded" on a busy machine, with nothing found.
FUZZSHORT ?= 3000x

.PHONY: fuzz fuzz-short

fuzz:
	FUZZTIME=$(FUZZTIME) FUZZPARALLEL=$(FUZZPARALLEL) bash ci/fuzz.sh

fuzz-short:
	FUZZTIME=$(FUZZSHORT) FUZZPARALLEL=$(FUZZPARALLEL) bash ci/fuzz.sh

.DEFAULT_GOAL := $(fuzz_mk_default_goal)
