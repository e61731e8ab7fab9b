# Cloud Hypervisor backend (vmm/cloudhypervisor). Its REST client is generated
# by oapi-codegen (a Go tool in go.mod) from the pinned spec copy in
# vmm/cloudhypervisor/spec/; the generated code is checked in, and the
# top-level `make check-generate` fails when regenerating changes it.
.PHONY: generate-ch test-ch

generate-ch:
	go generate ./vmm/cloudhypervisor/...

# Contract and unit tests, then the real-binary suite verbosely, so that its
# skip reason shows where cloud-hypervisor or working KVM is missing.
test-ch:
	go test -race -count=1 ./vmm/cloudhypervisor/...
	go test -count=1 -v -run TestConformanceRealCloudHypervisor ./vmm/cloudhypervisor/
