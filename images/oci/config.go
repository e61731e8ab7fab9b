package oci

import (
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/agentbox/agentbox/images/imageconfig"
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

// ConfigOf extracts what a template keeps of an image config.
func ConfigOf(cf *v1.ConfigFile) imageconfig.Config {
	c := cf.Config
	out := imageconfig.Config{WorkingDir: c.WorkingDir, User: c.User, Entrypoint: c.Entrypoint, Cmd: c.Cmd}
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
