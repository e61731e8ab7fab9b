# The web console (console/, Vite + TypeScript): `make console` builds its
# bundle into hostd/console/dist, which is checked in and embedded, so `go
# build` needs no Node. check-console rebuilds it and fails on a diff.
.PHONY: console console-deps check-console console-screenshots

console-deps:
	cd console && npm ci --no-audit --no-fund

console: console-deps
	cd console && npm run build

check-console: console
	@git diff --exit-code -- hostd/console/dist || { echo "the console bundle is stale: run make console" >&2; exit 1; }
	@test -z "$$(git status --porcelain -- hostd/console/dist)" || { git status --porcelain -- hostd/console/dist; echo "make console left new files" >&2; exit 1; }

# The console's browser test (hostd/console, tag vm) needs console/node_modules
# (playwright-core); it skips, saying so, without them.
test-vm: console-deps

# Runs the browser tests and keeps their screenshots in console/screenshots/
# (the README shows them).
console-screenshots: console-deps
	@mkdir -p $(BIN)/test-artifacts
	AGENTBOX_CONSOLE_SCREENSHOTS=1 go test -tags vm -count=1 -v -run 'TestConsole' -artifacts -outputdir $(BIN)/test-artifacts ./hostd/console/
