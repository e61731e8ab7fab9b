package oci

import (
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Phases of a template build from an image, as progress reports them.
const (
	PhasePull   = "pull"   // Current/Total: bytes of compressed layers
	PhaseUnpack = "unpack" // Current/Total: layers applied
	PhaseBuild  = "build"  // the ext4 and qcow2 base
	PhaseCached = "cached" // the base was already made
)

// Progress is one progress report.
type Progress struct {
	Phase          string
	Current, Total int64
}

// Config is what a template keeps of an image's config.
type Config struct {
	// Env is the image's environment as a map (later entries win).
	Env        map[string]string `json:"env,omitempty"`
	WorkingDir string            `json:"working_dir,omitempty"`
	// User is the image's default user ("name", "uid", "uid:gid"...).
	User       string   `json:"user,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	// ExposedPorts are sorted ("8080/tcp").
	ExposedPorts []string `json:"exposed_ports,omitempty"`
}

// ConfigOf extracts a template's Config from an image config.
func ConfigOf(cf *v1.ConfigFile) Config {
	c := cf.Config
	out := Config{WorkingDir: c.WorkingDir, User: c.User, Entrypoint: c.Entrypoint, Cmd: c.Cmd}
	for _, kv := range c.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		if out.Env == nil {
			out.Env = map[string]string{}
		}
		out.Env[k] = v
	}
	for p := range c.ExposedPorts {
		out.ExposedPorts = append(out.ExposedPorts, p)
	}
	sort.Strings(out.ExposedPorts)
	return out
}
