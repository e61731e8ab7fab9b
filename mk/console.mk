# The web console (console/, Vite + TypeScript): `make console` builds its
# bundle into hostd/console/dist, which is checked in and embedded, so `go
# build` needs no Node. check-console rebuilds it and fails on a diff.
.PHONY: console console-deps check-console

console-deps:
	cd console && npm ci --no-audit --no-fund

console: console-deps
	cd console && npm run build

check-console: console
	@git diff --exit-code -- hostd/console/dist || { echo "the console bundle is stale: run make console" >&2; exit 1; }
	@test -z "$$(git status --porcelain -- hostd/console/dist)" || { git status --porcelain -- hostd/console/dist; echo "make console left new files" >&2; exit 1; }
