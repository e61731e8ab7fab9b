package sandbox

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/agentbox/agentbox/vmm"
)

// The VMM jail: each sandbox's VMM drops to an unprivileged user once it
// has opened its files (vmm.Config.RunAs, QEMU -runas). With a UIDRange
// every sandbox gets a uid of its own, and a gid of the same number, so one
// escaped VMM can neither signal, trace nor read another one; with an Owner
// they all share one user.
//
// A sandbox's directory stays hostd's (root's), group the VMM's gid, mode
// 0710: its VMM can reach the files in it by name but cannot create,
// rename or replace any (no planted symlinks for hostd to follow), and
// other VMMs cannot enter it at all. QEMU works (and is chrooted) in it and
// names its files relative to it (vmm/qemu paths.go), so the data
// directory and sandboxes/ above it stay 0700. The files the VMM opens after the drop
// are its own, mode 0600: the overlays it writes (and the frozen overlay
// under a snapshot's new one, which QEMU reopens read-only by path; the
// snapshot engine hands it back to hostd once frozen). Everything else it
// opened before the drop, as root (kernel, initramfs, base image, snapshot
// layers and memory, sockets, console), or gets as a descriptor (the
// migration streams of snapshots and restores).
//
// The VMM's user is recorded in the directory (vmmUserFile, written by
// hostd), so a restore after a pause, a re-adoption after a hostd restart
// and every overlay of the sandbox keep it, and a uid is free again once
// its sandbox's directory is gone.

// vmmUserFile records a sandbox's VMM user ("uid:gid") in its directory.
const vmmUserFile = "vmm-user"

// Owner is the one unprivileged user that every VMM process runs as
// (`agentbox serve --vmm-user NAME`).
type Owner struct {
	UID, GID int
}

// UIDRange is the uids (and gids of the same numbers) that sandboxes' VMMs
// get one each (`agentbox serve --vmm-uids FIRST-LAST`). No user or group of
// the host may have one. Hostds may share a range: each uid is claimed on
// the host (uidclaims.go).
type UIDRange struct {
	First, Last int
}

// Size is how many uids r holds.
func (r UIDRange) Size() int { return r.Last - r.First + 1 }

// Validate reports a range that is empty or holds root.
func (r UIDRange) Validate() error {
	if r.First < 1 || r.Last < r.First || r.Last > maxID {
		return fmt.Errorf("sandbox: uid range %d-%d: want 1 <= first <= last <= %d", r.First, r.Last, maxID)
	}
	return nil
}

// maxID is the largest uid or gid (2^32-2; -1 means "unchanged").
const maxID = 1<<32 - 2

// vmmJail hands out the VMMs' users (see the top of this file).
type vmmJail struct {
	owner *Owner
	uids  *UIDRange
	// dir is the sandboxes' parent directory.
	dir string

	mu sync.Mutex
	// next is the uid to try first: allocation goes round the range, so a
	// freed uid is the last to be used again.
	next int
	// taken maps the uids handed out to their sandbox directory; loaded
	// lazily, and an entry whose directory is gone is free.
	taken map[int]string
	// claims makes each uid unique among the host's hostds (uidclaims.go).
	claims uidClaims
	log    *slog.Logger
}

func newJail(opts Options) (*vmmJail, error) {
	j := &vmmJail{owner: opts.VMMOwner, uids: opts.VMMUIDs, dir: filepath.Join(opts.DataDir, "sandboxes"), log: opts.Logger}
	if j.log == nil {
		j.log = slog.Default()
	}
	if j.uids != nil {
		j.claims.dir = opts.UIDClaims
		if j.claims.dir == "" {
			j.claims.dir = DefaultUIDClaims
		}
	}
	switch {
	case j.owner != nil && j.uids != nil:
		return nil, errors.New("sandbox: VMMOwner and VMMUIDs are exclusive")
	case j.owner != nil && (j.owner.UID < 1 || j.owner.GID < 1):
		return nil, fmt.Errorf("sandbox: VMMOwner %d:%d is not an unprivileged user", j.owner.UID, j.owner.GID)
	case j.uids != nil:
		if err := j.uids.Validate(); err != nil {
			return nil, err
		}
		// Start where this data directory's hash says: two hostds given
		// the same range then seldom try the same uids (the host-wide
		// claims keep them apart when they do).
		h := fnv.New32a()
		h.Write([]byte(opts.DataDir))
		j.next = j.uids.First + int(h.Sum32()%uint32(j.uids.Size()))
	}
	return j, nil
}

// on reports whether VMMs drop to another user.
func (j *vmmJail) on() bool { return j.owner != nil || j.uids != nil }

// claim gives the new sandbox directory dir its VMM's user: it records
// one and makes dir reachable by it only.
func (j *vmmJail) claim(dir string) error {
	if !j.on() {
		return nil
	}
	if u, err := runAsOf(dir); err != nil || u != nil {
		return err // the directory has its user already
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	u, err := j.pick(dir)
	if err != nil {
		return err
	}
	if err := writeRunAs(dir, u); err != nil {
		return err
	}
	if j.uids != nil {
		j.taken[u.UID] = dir
	}
	return nil
}

// pick chooses the next VMM user for sandbox directory dir, a uid that no
// sandbox of this hostd or of another on the host holds. Call with mu held.
func (j *vmmJail) pick(dir string) (vmm.User, error) {
	if j.owner != nil {
		return vmm.User{UID: j.owner.UID, GID: j.owner.GID}, nil
	}
	if j.taken == nil {
		j.taken = scanTaken(j.dir)
		j.claimTaken()
	}
	r := *j.uids
	for range r.Size() {
		uid := j.next
		if j.next++; j.next > r.Last {
			j.next = r.First
		}
		if dir, ok := j.taken[uid]; ok {
			if u, err := runAsOf(dir); err == nil && u != nil && u.UID == uid {
				continue
			}
			delete(j.taken, uid) // its sandbox is gone
		}
		ok, err := j.claims.claim(uid, dir)
		if err != nil {
			return vmm.User{}, err
		}
		if ok {
			return vmm.User{UID: uid, GID: uid}, nil
		}
	}
	return vmm.User{}, fmt.Errorf("sandbox: every uid of the VMM range %d-%d is in use", r.First, r.Last)
}

// claimTaken claims on the host the uids this hostd's sandboxes hold
// already (after a reboot cleared the claims, or from an older hostd); a
// uid that another hostd's sandbox holds is logged, not taken away.
func (j *vmmJail) claimTaken() {
	for uid, dir := range j.taken {
		if ok, err := j.claims.claim(uid, dir); err != nil || !ok {
			j.log.Warn("a vmm uid of this hostd is claimed by another sandbox on the host", "uid", uid, "dir", dir, "err", err)
		}
	}
}

// scanTaken reads the VMM users recorded under the sandboxes' directory.
func scanTaken(dir string) map[int]string {
	taken := map[int]string{}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		d := filepath.Join(dir, e.Name())
		if u, err := runAsOf(d); err == nil && u != nil {
			taken[u.UID] = d
		}
	}
	return taken
}

// writeRunAs records u in dir and gives dir to hostd, group u.GID, 0710.
func writeRunAs(dir string, u vmm.User) error {
	p := filepath.Join(dir, vmmUserFile)
	if err := os.WriteFile(p, []byte(u.String()+"\n"), 0o600); err != nil {
		return fmt.Errorf("sandbox: record the vmm user: %w", err)
	}
	if err := os.Lchown(dir, os.Geteuid(), u.GID); err != nil {
		return fmt.Errorf("sandbox: hand %s to the vmm user: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o710); err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	return nil
}

// runAsOf is the VMM user recorded in sandbox directory dir, or nil when
// its VMM runs as hostd's user.
func runAsOf(dir string) (*vmm.User, error) {
	b, err := os.ReadFile(filepath.Join(dir, vmmUserFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox: vmm user: %w", err)
	}
	uid, gid, ok := strings.Cut(strings.TrimSpace(string(b)), ":")
	u, err1 := strconv.Atoi(uid)
	g, err2 := strconv.Atoi(gid)
	if !ok || err1 != nil || err2 != nil || u < 1 || g < 1 {
		return nil, fmt.Errorf("sandbox: %s: bad vmm user %q", filepath.Join(dir, vmmUserFile), b)
	}
	return &vmm.User{UID: u, GID: g}, nil
}

// ownFiles hands files of a sandbox directory to the directory's VMM user,
// mode 0600 (nothing when it has none). Lchown: a name is never followed.
func ownFiles(paths ...string) error {
	for _, p := range paths {
		u, err := runAsOf(filepath.Dir(p))
		if err != nil || u == nil {
			return err
		}
		if err := os.Lchown(p, u.UID, u.GID); err != nil {
			return fmt.Errorf("sandbox: hand %s to the vmm user: %w", p, err)
		}
		if err := os.Chmod(p, 0o600); err != nil {
			return fmt.Errorf("sandbox: %w", err)
		}
	}
	return nil
}
