package hostd

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/agentbox/agentbox/hostd/imagetemplate"
	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/hostd/secrets"
	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/images/oci"
)

// DefaultImageMaxMiB bounds an image's unpacked size by default.
const DefaultImageMaxMiB = 16384

// ImageConfig configures templates built from OCI images.
type ImageConfig struct {
	// ImportDirs are the directories under which an API caller may name
	// a local OCI layout or `docker save` tarball; none: local paths are
	// refused.
	ImportDirs []string
	// InsecureRegistries ("host:port") may be reached over plain HTTP;
	// loopback registries always may.
	InsecureRegistries []string
	// RegistryAuthFile is a Docker config file with registry credentials.
	RegistryAuthFile string
	// MaxMiB bounds an image's unpacked size (0: DefaultImageMaxMiB).
	MaxMiB int64
}

// newImageTemplates makes the image template builder: its bases live in
// DataDir/images, one per image digest.
func newImageTemplates(cfg Config, st *store.Store, svc sandbox.Service, box *secrets.Box, log *slog.Logger) (*imagetemplate.Builder, error) {
	ic := cfg.Images
	if ic.MaxMiB == 0 {
		ic.MaxMiB = DefaultImageMaxMiB
	}
	src := oci.SourceOptions{Insecure: ic.InsecureRegistries, LocalRoots: ic.ImportDirs}
	if ic.RegistryAuthFile != "" {
		kc, err := oci.DockerConfigKeychain(ic.RegistryAuthFile)
		if err != nil {
			return nil, fmt.Errorf("registry auth file: %w", err)
		}
		src.Keychain = kc
	}
	b := &imagetemplate.Builder{Sandboxes: svc, Store: st, Bases: &oci.Builder{Dir: filepath.Join(cfg.DataDir, "images"), MaxBytes: ic.MaxMiB << 20},
		Source: src, Log: log, Initramfs: cfg.Initramfs, KernelDir: filepath.Join(cfg.DataDir, "kernels")}
	if box != nil {
		b.Secrets = box
	}
	if err := b.Bases.Sweep(); err != nil {
		log.Warn("image builds left behind", "err", err)
	}
	return b, nil
}
