package watch

import (
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// maxCachedDirs bounds the directory path cache; it is cleared when full.
const maxCachedDirs = 4096

// resolver turns fanotify's directory file handles into paths. It opens a
// handle with open_by_handle_at(2) on a descriptor of the marked filesystem
// and reads the path back from /proc/self/fd, once: the path is cached by
// handle, and the watcher moves cached paths along when it sees a directory
// renamed (moved), so events are named as of when they happened. The cache
// also names directories that are already gone (e.g. the entries that
// `rm -r` deletes inside a directory it deletes next). Opening a handle per
// event cost most of the watcher's time under emulation.
type resolver struct {
	mounts map[[2]int32]int // fsid → an O_PATH fd on that filesystem
	cache  map[string]string
}

func newResolver() *resolver {
	return &resolver{mounts: map[[2]int32]int{}, cache: map[string]string{}}
}

// addMount records fd as the way into the filesystem fsid; the resolver
// closes it in close.
func (r *resolver) addMount(fsid [2]int32, fd int) { r.mounts[fsid] = fd }

func (r *resolver) hasMount(fsid [2]int32) bool {
	_, ok := r.mounts[fsid]
	return ok
}

func (r *resolver) close() {
	for _, fd := range r.mounts {
		unix.Close(fd)
	}
	r.mounts = nil
}

// path returns the full path of the entry a record names.
func (r *resolver) path(rec fidRecord) (string, error) {
	dir, err := r.dir(rec)
	if err != nil {
		return "", err
	}
	if rec.name == "" || rec.name == "." {
		return dir, nil
	}
	return path.Join(dir, rec.name), nil
}

// dir returns the path of the directory a record's handle names.
func (r *resolver) dir(rec fidRecord) (string, error) {
	key := rec.key()
	if p, ok := r.cache[key]; ok {
		return p, nil
	}
	p, err := r.open(rec)
	if err != nil {
		return "", err
	}
	if len(r.cache) >= maxCachedDirs {
		clear(r.cache)
	}
	r.cache[key] = p
	return p, nil
}

// moved renames the cached paths of directory from and everything under it
// to the same places under to.
func (r *resolver) moved(from, to string) {
	for k, p := range r.cache {
		switch {
		case p == from:
			r.cache[k] = to
		case strings.HasPrefix(p, from+"/"):
			r.cache[k] = to + p[len(from):]
		}
	}
}

// remember caches p as the path of the directory whose own handle is in
// ev's FID record, or else the handle it has now. Then events inside it
// still resolve after it is deleted: `mkdir d; touch d/f; rm -r d`.
func (r *resolver) remember(ev rawEvent, fsid [2]int32, p string) {
	rec, ok := ev.record(unix.FAN_EVENT_INFO_TYPE_FID)
	if !ok {
		h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, p, 0)
		if err != nil {
			return
		}
		rec = fidRecord{fsid: fsid, htype: h.Type(), handle: h.Bytes()}
	}
	if len(r.cache) >= maxCachedDirs {
		clear(r.cache)
	}
	r.cache[rec.key()] = p
}

// open resolves a handle through the kernel; it fails for a directory that
// no longer exists.
func (r *resolver) open(rec fidRecord) (string, error) {
	mfd, ok := r.mounts[rec.fsid]
	if !ok {
		return "", fmt.Errorf("watch: event on unmarked filesystem %x.%x", rec.fsid[0], rec.fsid[1])
	}
	fd, err := unix.OpenByHandleAt(mfd, unix.NewFileHandle(rec.htype, rec.handle), unix.O_PATH|unix.O_CLOEXEC)
	if err != nil {
		return "", fmt.Errorf("open_by_handle_at: %w", err)
	}
	defer unix.Close(fd)

	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return "", err
	}
	if strings.HasSuffix(p, " (deleted)") {
		return "", fmt.Errorf("watch: directory %s: %w", p, os.ErrNotExist)
	}
	return p, nil
}

// openFile opens the object a record's handle names, with flags.
func (r *resolver) openFile(rec fidRecord, flags int) (int, error) {
	mfd, ok := r.mounts[rec.fsid]
	if !ok {
		return -1, fmt.Errorf("watch: unmarked filesystem %x.%x", rec.fsid[0], rec.fsid[1])
	}
	return unix.OpenByHandleAt(mfd, unix.NewFileHandle(rec.htype, rec.handle), flags)
}
