package hostd

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/vmm"
)

// DefaultVMMUIDs is the range from which each sandbox's VMM gets a uid
// (and gid) of its own unless told otherwise (Config.VMMUIDs): far above
// the users and groups that distributions and directory services hand out.
const DefaultVMMUIDs = "2000000000-2000065535"

// The host's user and group databases, and this process's id maps, that a
// range of VMM uids must stay clear of (variables for tests).
var (
	passwdFile = "/etc/passwd"
	groupFile  = "/etc/group"
	uidMapFile = "/proc/self/uid_map"
	gidMapFile = "/proc/self/gid_map"
)

// vmmJail resolves cfg.VMMUser and cfg.VMMUIDs into opts: the users the
// sandboxes' VMMs drop to (hostd/sandbox jail.go). By default each QEMU gets
// a uid of its own from DefaultVMMUIDs; "--vmm-user root" or "--vmm-uids
// off" keeps them root, and "--vmm-user NAME" runs them all as NAME. The
// default gives way, with a warning, where it cannot work (a backend other
// than QEMU, hostd not root); an explicit choice fails there instead.
func vmmJail(cfg Config, drv vmm.Driver, log *slog.Logger, opts *sandbox.Options) error {
	name, uids := cfg.VMMUser, cfg.VMMUIDs
	switch {
	case name != "" && uids != "" && (name != "root" || uids != "off"):
		return fmt.Errorf("hostd: --vmm-user %q and --vmm-uids %q: choose one", name, uids)
	case name == "root" || uids == "off":
		log.Warn("vmm jail off: VMM processes run as root (--vmm-user root or --vmm-uids off)")
		return nil
	}
	explicit := name != "" || uids != ""
	why := ""
	switch {
	case drv.Name() != "qemu":
		why = "only the qemu backend can drop privileges (-runas), not " + drv.Name()
	case os.Geteuid() != 0:
		why = "hostd is not root, so it cannot hand files to other users"
	}
	if why != "" {
		if explicit {
			return fmt.Errorf("hostd: vmm users: %s", why)
		}
		log.Warn("vmm jail off: VMM processes run as hostd's user", "reason", why)
		return nil
	}
	if name != "" {
		o, err := lookupVMMUser(name)
		opts.VMMOwner = o
		return err
	}
	if uids == "" {
		uids = DefaultVMMUIDs
	}
	r, err := parseUIDRange(uids)
	if err == nil {
		err = checkUIDRange(r)
	}
	if err != nil {
		return fmt.Errorf("hostd: --vmm-uids: %w", err)
	}
	log.Info("vmm jail: each sandbox's VMM runs as a uid of its own", "uids", uids)
	opts.VMMUIDs = &r
	return nil
}

// lookupVMMUser resolves --vmm-user NAME to an unprivileged user.
func lookupVMMUser(name string) (*sandbox.Owner, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("hostd: --vmm-user: %w", err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err := errors.Join(err1, err2); err != nil || uid == 0 || gid == 0 {
		return nil, fmt.Errorf("hostd: --vmm-user %q: want an unprivileged user and group (uid %s, gid %s): %v", name, u.Uid, u.Gid, err)
	}
	return &sandbox.Owner{UID: uid, GID: gid}, nil
}

// parseUIDRange parses "FIRST-LAST".
func parseUIDRange(s string) (sandbox.UIDRange, error) {
	a, b, ok := strings.Cut(s, "-")
	first, err1 := strconv.ParseUint(a, 10, 32)
	last, err2 := strconv.ParseUint(b, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return sandbox.UIDRange{}, fmt.Errorf("%q: want FIRST-LAST (e.g. %s), or off", s, DefaultVMMUIDs)
	}
	r := sandbox.UIDRange{First: int(first), Last: int(last)}
	return r, r.Validate()
}

// checkUIDRange refuses a range that holds a user or group of the host's
// files (directory services that cannot be listed are not checked), or
// that this process's user namespace does not map.
func checkUIDRange(r sandbox.UIDRange) error {
	for _, db := range []struct{ path, what string }{{passwdFile, "user"}, {groupFile, "group"}} {
		if err := checkIDFile(r, db.path, db.what); err != nil {
			return err
		}
	}
	for _, p := range []string{uidMapFile, gidMapFile} {
		if err := checkIDMap(r, p); err != nil {
			return err
		}
	}
	return nil
}

// checkIDFile refuses r if a line of path (passwd or group format) has an
// id in it.
func checkIDFile(r sandbox.UIDRange, path, what string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 3 {
			continue
		}
		ids := []string{fields[2]}
		if what == "user" && len(fields) > 3 {
			ids = append(ids, fields[3]) // the user's group
		}
		for _, s := range ids {
			if id, err := strconv.Atoi(s); err == nil && id >= r.First && id <= r.Last {
				return fmt.Errorf("%d-%d overlaps %s %q (id %d in %s): choose a range no user or group has", r.First, r.Last, what, fields[0], id, path)
			}
		}
	}
	return sc.Err()
}

// checkIDMap refuses r unless one line of an id map (uid_map or gid_map:
// "inside outside count") holds all of it.
func checkIDMap(r sandbox.UIDRange, path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		in, err1 := strconv.ParseUint(f[0], 10, 64)
		n, err2 := strconv.ParseUint(f[2], 10, 64)
		if err1 == nil && err2 == nil && uint64(r.First) >= in && uint64(r.Last) < in+n {
			return nil
		}
	}
	return fmt.Errorf("%d-%d is not mapped in this user namespace (%s): choose ids it maps", r.First, r.Last, path)
}
