# API code generation, included by the top-level Makefile.
#
# hostd/api/openapi.yaml is the source of truth. From it oapi-codegen (a Go
# tool pinned in go.mod) generates hostd/api/api.gen.go (models + net/http
# ServeMux server) and client/client.gen.go (models + client); both are
# checked in. The //go:generate lines are in hostd/api/doc.go and
# client/doc.go, the generator settings in */oapi-codegen.yaml.

# Keep the including Makefile's default goal: this file is read first.
api_mk_default_goal := $(.DEFAULT_GOAL)

.PHONY: generate-api check-api

generate-api:
	go generate ./hostd/api/... ./client/...

# Fails if the checked-in generated code differs from the document.
check-api: generate-api
	@git diff --exit-code -- hostd/api/api.gen.go client/client.gen.go || { echo "generated API code is stale: run make generate-api" >&2; exit 1; }

.DEFAULT_GOAL := $(api_mk_default_goal)
