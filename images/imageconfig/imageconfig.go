// Package imageconfig is what a template keeps of the config that its image
// or its Dockerfile set: env, working directory, user, entrypoint and cmd,
// ports and labels. It imports nothing, so that the OCI import (images/oci),
// the Dockerfile builder (client/dockerfile) and hostd's API, which starts a
// template's main service from it, share one definition without linking each
// other.
package imageconfig

// GuestFile is the guest file where a Dockerfile build records its
// template's Config, as JSON (its last step). hostd reads the Entrypoint
// and Cmd from it to start a sandbox's main service.
const GuestFile = "/etc/agentbox/dockerfile-config.json"

// Config is what an image's config or a Dockerfile sets for a template's
// sandboxes.
type Config struct {
	// Env is the environment as a map (later entries win).
	Env        map[string]string `json:"env,omitempty"`
	WorkingDir string            `json:"working_dir,omitempty"`
	// User is the default user ("name", "uid", "uid:gid"...).
	User       string   `json:"user,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	// ExposedPorts are "8080/tcp"...: an image's sorted, a Dockerfile's
	// in the order of its EXPOSE lines.
	ExposedPorts []string `json:"exposed_ports,omitempty"`
	// Labels are a Dockerfile's LABELs (an image's labels are not kept).
	Labels map[string]string `json:"labels,omitempty"`
}
