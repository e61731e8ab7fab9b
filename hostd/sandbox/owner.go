package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
)

// Owner is the unprivileged user that VMM processes run as (QEMU -runas):
// the files a VMM opens after dropping privileges (the sandbox directory
// and its overlays) are chowned to it. A nil *Owner means the VMM runs as
// hostd's user, and its methods do nothing.
type Owner struct {
	UID, GID int
}

// own hands paths to the VMM's user.
func (o *Owner) own(paths ...string) error {
	if o == nil {
		return nil
	}
	for _, p := range paths {
		if err := os.Chown(p, o.UID, o.GID); err != nil {
			return fmt.Errorf("sandbox: hand %s to the vmm user: %w", p, err)
		}
	}
	return nil
}

// openDirs lets the VMM's user reach its sandbox directory by path (QEMU
// reopens images by name after it dropped privileges): the data directory
// and sandboxes/ become traversable, not listable.
func (o *Owner) openDirs(dataDir string) error {
	if o == nil {
		return nil
	}
	for _, d := range []string{dataDir, filepath.Join(dataDir, "sandboxes")} {
		if err := os.Chmod(d, 0o711); err != nil {
			return fmt.Errorf("sandbox: %w", err)
		}
	}
	return nil
}
