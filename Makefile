# agentbox — see README.md. `make demo` and `make test` are the quick start.
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin
CACHE ?= $(or $(AGENTBOX_CACHE),/var/cache/agentbox)
export AGENTBOX_CACHE := $(CACHE)
BIN := $(CURDIR)/bin
# The initramfs holds this checkout's guestinit, so it is a build output of
# the checkout (bin/), not of the shared asset cache.
export AGENTBOX_INITRAMFS ?= $(BIN)/initramfs.cpio
TOOLBIN := $(CURDIR)/bin/tools
# Tests that boot real VMs carry the build tag `vm` (so `go test ./...` runs
# anywhere, without guest assets); these are the packages that have some.
VM_PKGS = $(shell grep -rl --include='*_test.go' '^//go:build vm' . | xargs -n1 dirname | sort -u)
GO_TEST_FLAGS ?=

-include mk/*.mk
# The included files define targets first; `make` alone still builds.
.DEFAULT_GOAL := all

.PHONY: all deps assets kernel rootfs initramfs templates build generate check-generate test test-unit test-vm bench demo clean

all: build

deps:
	bash ci/install-deps.sh

kernel: deps
	bash kernel/fetch.sh
	bash kernel/ondemand.sh

rootfs: deps
	bash images/build-rootfs.sh

initramfs: kernel
	CGO_ENABLED=0 go build -trimpath -o $(BIN)/guestinit ./cmd/guestinit
	bash images/mkinitramfs.sh $(BIN)/guestinit $(AGENTBOX_INITRAMFS)

assets: kernel rootfs initramfs

# The ready templates (images/templates/NAME) as OCI layouts in
# $(CACHE)/templates/NAME, each cached by its recipe's key; `make
# template-NAME` builds one.
TEMPLATES := $(notdir $(patsubst %/recipe,%,$(wildcard images/templates/*/recipe)))
templates: $(addprefix template-,$(TEMPLATES))

template-%: deps
	bash images/build-template.sh $*

build:
	go build -o $(BIN)/ ./cmd/agentbox ./cmd/hostd
	CGO_ENABLED=0 go build -trimpath -o $(BIN)/guestinit ./cmd/guestinit

tools:
	@mkdir -p $(TOOLBIN)
	go build -o $(TOOLBIN)/ tool

generate: tools
	PATH=$(TOOLBIN):$$PATH go generate ./proto/... ./apitypes/... ./hostd/api/... ./client/... ./vmm/cloudhypervisor/...

# CI: regenerating must not change any checked-in file.
check-generate: generate
	@git diff --exit-code -- proto apitypes hostd/api client vmm/cloudhypervisor || { echo "generated code is stale: run make generate" >&2; exit 1; }
	@test -z "$$(git status --porcelain -- proto apitypes hostd/api client vmm/cloudhypervisor)" || { git status --porcelain; echo "make generate left new files" >&2; exit 1; }

# test: unit tests (with the fuzz seed corpora), real VMs, then a short
# fuzzing pass of every target (mk/fuzz.mk) and a short soak of every part,
# hostd kill -9 cycles included (mk/soak.mk).
test: assets test-unit test-vm fuzz-short soak-short

test-unit:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	go vet ./...
	go vet -tags vm ./...
	go test -race -count=1 $(GO_TEST_FLAGS) ./...

test-vm: assets templates
	@mkdir -p $(BIN)/test-artifacts # screenshots and other files that tests keep (t.ArtifactDir)
	go test -tags vm -count=1 -timeout 45m -artifacts -outputdir $(BIN)/test-artifacts $(GO_TEST_FLAGS) $(VM_PKGS)
	@echo "Cloud Hypervisor end-to-end (runs only where the binary and working KVM exist):"
	go test -count=1 -v -run TestConformanceRealCloudHypervisor ./vmm/cloudhypervisor/

bench: assets build
	go run ./ci/bench

demo: deps assets build
	bash ci/demo.sh

clean:
	rm -rf $(BIN)
