#!/usr/bin/env bash
# Runs every native Go fuzz target of the module (func FuzzXxx in a
# _test.go file) for FUZZTIME each, one target at a time, with FUZZPARALLEL
# workers (1: the machine is shared). A crash is written to the package's
# testdata/fuzz/FuzzXxx/ (commit it as a regression seed, with the fix);
# the run goes on with the other targets and fails at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZTIME=${FUZZTIME:-30s}
FUZZPARALLEL=${FUZZPARALLEL:-1}
failed=()
while read -r file; do
	pkg=./$(dirname "$file")
	for t in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | cut -d' ' -f2); do
		echo "== $pkg $t ($FUZZTIME)"
		if ! go test -run '^$' -fuzz "^$t\$" -fuzztime "$FUZZTIME" -parallel "$FUZZPARALLEL" "$pkg"; then
			failed+=("$pkg $t")
		fi
	done
done < <(grep -rl --include='*_test.go' '^func Fuzz' . | sed 's#^\./##' | sort)
if ((${#failed[@]})); then
	printf 'fuzz: failed: %s\n' "${failed[@]}" >&2
	exit 1
fi
