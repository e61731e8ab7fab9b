// Package deploy holds the Kubernetes manifests of an agentbox fleet
// (Kustomize: base/, components/, overlays/) and the tests that render
// them, decode every object strictly into its Kubernetes type, and check
// the flags and environment they pass against the binaries' own --help.
// See README.md.
package deploy
