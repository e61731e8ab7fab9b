package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// DefaultUIDClaims is where the hostds of one host claim their VMMs' uids
// (Options.UIDClaims): on /run, which a reboot clears along with the VMMs.
const DefaultUIDClaims = "/run/agentbox/vmm-uids"

// uidClaims makes a VMM uid unique on the host, not only within one hostd:
// every hostd that hands out uids claims each one in a directory shared by
// all of them, as a symlink named by the uid to the sandbox directory that
// holds it, made under an exclusive flock of that directory. A claim whose
// sandbox directory is gone, or records another uid, is stale and is
// taken over; a directory that exists and records no user yet is being
// claimed and counts as taken. No release is needed: deleting a sandbox's
// directory frees its uid.
type uidClaims struct{ dir string }

// claim claims uid for sandbox directory sandboxDir, and reports false when
// another live sandbox holds it.
func (c uidClaims) claim(uid int, sandboxDir string) (bool, error) {
	if c.dir == "" {
		return true, nil
	}
	unlock, err := c.lock()
	if err != nil {
		return false, err
	}
	defer unlock()
	link := filepath.Join(c.dir, strconv.Itoa(uid))
	target, err := os.Readlink(link)
	switch {
	case err == nil && target == sandboxDir:
		return true, nil
	case err == nil && holds(target, uid):
		return false, nil
	case err == nil:
		if err := os.Remove(link); err != nil {
			return false, fmt.Errorf("sandbox: stale uid claim: %w", err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return false, fmt.Errorf("sandbox: uid claim: %w", err)
	}
	if err := os.Symlink(sandboxDir, link); err != nil {
		return false, fmt.Errorf("sandbox: claim uid %d: %w", uid, err)
	}
	return true, nil
}

// holds reports whether sandbox directory dir still holds uid: it exists
// and records uid, or no user yet (a claim in progress).
func holds(dir string, uid int) bool {
	if _, err := os.Lstat(dir); err != nil {
		return false
	}
	u, err := runAsOf(dir)
	return err != nil || u == nil || u.UID == uid
}

// lock takes the claims directory's flock, making it first if needed.
func (c uidClaims) lock() (func(), error) {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return nil, fmt.Errorf("sandbox: uid claims: %w", err)
	}
	f, err := os.Open(c.dir)
	if err != nil {
		return nil, fmt.Errorf("sandbox: uid claims: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("sandbox: lock uid claims: %w", err)
	}
	return func() { f.Close() }, nil // closing releases the lock
}
