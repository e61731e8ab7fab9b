package guestinit

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// identityFiles carry a sandbox's identity; the agent's SetIdentity
// rewrites them in every sandbox restored from a snapshot.
var identityFiles = []string{"/etc/hostname", "/etc/machine-id"}

// identityDir holds the identity files' contents on tmpfs.
const identityDir = "/run/agentbox/identity"

// bindIdentity binds a tmpfs copy of each identity file over it, as
// container runtimes bind /etc/hostname, so that a restored sandbox's new
// identity is written to memory, not to its disk. Under TCG, a fork's
// first write to its ext4 root costs 40-90 ms of translating the
// filesystem's write path, on the path of every create, restore and fork;
// a tmpfs write costs 10-15 ms. A file starts with the disk's content (the
// hostname with the boot's, if any); a file that cannot be bound stays on
// the disk, and is still rewritten there.
func bindIdentity(hostname string) error {
	if err := os.MkdirAll(identityDir, 0o755); err != nil {
		return err
	}
	var errs []error
	for _, target := range identityFiles {
		content := []byte(nil)
		if target == "/etc/hostname" && hostname != "" {
			content = []byte(hostname + "\n")
		}
		if err := bindFile(target, filepath.Join(identityDir, filepath.Base(target)), content); err != nil {
			errs = append(errs, fmt.Errorf("bind %s: %w", target, err))
		}
	}
	return errors.Join(errs...)
}

// bindFile writes content (or, if nil, target's own content) to src and
// binds src over target, creating an empty target if there is none.
func bindFile(target, src string, content []byte) error {
	mode := fs.FileMode(0o644)
	if st, err := os.Stat(target); err == nil {
		if !st.Mode().IsRegular() {
			return fmt.Errorf("not a regular file (%v)", st.Mode().Type())
		}
		mode = st.Mode().Perm()
		if content == nil {
			if content, err = os.ReadFile(target); err != nil {
				return err
			}
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	} else if err := os.WriteFile(target, nil, mode); err != nil {
		return err // no /etc (an image without one): nothing to bind
	}
	if err := os.WriteFile(src, content, mode); err != nil {
		return err
	}
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		return &fs.PathError{Op: "mount", Path: target, Err: err}
	}
	return nil
}
