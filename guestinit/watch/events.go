package watch

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"

	"golang.org/x/sys/unix"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// File operations as the proto spells them.
const (
	opCreated  = "created"
	opModified = "modified"
	opDeleted  = "deleted"
	opRenamed  = "renamed"
)

// Limits of the op mapping.
const (
	maxCreated   = 4096    // files remembered between create and close_write
	maxHashBytes = 1 << 20 // files up to this size get a sha256
)

// fileEvents maps one raw event to file events. fanotify merges the queued
// events of one process on one name into one mask (e.g. CREATE|CLOSE_WRITE
// for `echo hi > f`), at the position of the first, so a mask can yield
// several events. Their order is reconstructed: a DELETE merged into the
// CREATE or CLOSE_WRITE of an entry that is gone now may have happened
// after any of the other queued events (and must follow those inside a
// deleted directory), so it is returned in later, for the end of the drain.
func (w *Watcher) fileEvents(ev rawEvent) (now, later []*agentv1.FileEvent) {
	dir := ev.mask&unix.FAN_ONDIR != 0
	if ev.mask&unix.FAN_RENAME != 0 {
		return w.renamed(ev, dir), nil
	}
	rec, ok := ev.record(unix.FAN_EVENT_INFO_TYPE_DFID_NAME)
	if !ok {
		return nil, nil
	}
	p, err := w.res.path(rec)
	if err != nil {
		w.cfg.Log.Debug("watch: unresolved event", "name", rec.name, "err", err)
		return nil, nil
	}
	if w.ignored(p) {
		return nil, nil
	}
	mask := ev.mask
	if mask&unix.FAN_DELETE != 0 && mask&(unix.FAN_CREATE|unix.FAN_CLOSE_WRITE) != 0 {
		if _, statErr := os.Lstat(p); statErr == nil && mask&unix.FAN_CREATE != 0 {
			now = append(now, w.deleted(p, dir)) // deleted, then created again
		} else {
			later = append(later, &agentv1.FileEvent{Op: opDeleted, Path: p, Dir: dir})
		}
		mask &^= unix.FAN_DELETE
	}
	switch {
	case mask&unix.FAN_CREATE != 0 && mask&unix.FAN_CLOSE_WRITE != 0 && !dir:
		// Created and written (merged): closedWrite reports it once.
		w.created.add(p)
	case mask&unix.FAN_CREATE != 0:
		if dir {
			w.res.remember(ev, rec.fsid, p)
		}
		if e := w.createdEntry(p, dir); e != nil {
			now = append(now, e)
		}
	}
	if mask&unix.FAN_CLOSE_WRITE != 0 && !dir {
		now = append(now, w.closedWrite(ev, p))
	}
	if mask&unix.FAN_DELETE != 0 {
		now = append(now, w.deleted(p, dir))
	}
	if e := w.inPlace(ev, p, mask, dir); e != nil {
		now = append(now, e)
	}
	return now, later
}

// inPlace handles ATTRIB and MODIFY that no CREATE, CLOSE_WRITE or DELETE
// of the same event covers: a chmod, chown or touch alone, or a write by
// a process that keeps the file open, reported once until it closes it
// (a writer that never does, a log, would otherwise report every burst).
// A file created and not yet closed is reported at its close.
func (w *Watcher) inPlace(ev rawEvent, p string, mask uint64, dir bool) *agentv1.FileEvent {
	if mask&(unix.FAN_CREATE|unix.FAN_CLOSE_WRITE|unix.FAN_DELETE) != 0 || w.created.set[p] {
		return nil
	}
	switch {
	case mask&unix.FAN_ATTRIB != 0:
	case mask&unix.FAN_MODIFY != 0 && !dir && !w.open.set[p]:
		w.open.add(p)
	default:
		return nil
	}
	e := &agentv1.FileEvent{Op: opModified, Path: p, Dir: dir}
	if !dir {
		e.Size, e.Sha256 = w.describe(ev, p)
	}
	return e
}

// createdEntry handles CREATE. A regular file is reported when it is first
// closed for write, with its content; anything else (a directory, a
// symlink, a device node) at once.
func (w *Watcher) createdEntry(p string, dir bool) *agentv1.FileEvent {
	if dir {
		return &agentv1.FileEvent{Op: opCreated, Path: p, Dir: true}
	}
	fi, err := os.Lstat(p)
	if err != nil || fi.Mode().IsRegular() {
		w.created.add(p)
		return nil
	}
	return &agentv1.FileEvent{Op: opCreated, Path: p}
}

// closedWrite handles CLOSE_WRITE: created if the create is pending, else
// modified.
func (w *Watcher) closedWrite(ev rawEvent, p string) *agentv1.FileEvent {
	w.open.remove(p)
	op := opModified
	if w.created.remove(p) {
		op = opCreated
	}
	e := &agentv1.FileEvent{Op: op, Path: p}
	e.Size, e.Sha256 = w.describe(ev, p)
	return e
}

func (w *Watcher) deleted(p string, dir bool) *agentv1.FileEvent {
	w.created.remove(p)
	w.open.remove(p)
	return &agentv1.FileEvent{Op: opDeleted, Path: p, Dir: dir}
}

// renamed handles FAN_RENAME, whose event carries the old and the new entry.
func (w *Watcher) renamed(ev rawEvent, dir bool) []*agentv1.FileEvent {
	oldRec, ok1 := ev.record(unix.FAN_EVENT_INFO_TYPE_OLD_DFID_NAME)
	newRec, ok2 := ev.record(unix.FAN_EVENT_INFO_TYPE_NEW_DFID_NAME)
	if !ok1 || !ok2 {
		return nil
	}
	oldPath, err1 := w.res.path(oldRec)
	newPath, err2 := w.res.path(newRec)
	if err1 != nil || err2 != nil {
		w.cfg.Log.Debug("watch: unresolved rename", "old", oldRec.name, "new", newRec.name)
		return nil
	}
	if w.ignored(newPath) && w.ignored(oldPath) {
		return nil
	}
	if dir {
		w.res.moved(oldPath, newPath)
		w.res.remember(ev, newRec.fsid, newPath)
	}
	if w.created.remove(oldPath) {
		w.created.add(newPath)
	}
	if w.open.remove(oldPath) {
		w.open.add(newPath)
	}
	e := &agentv1.FileEvent{Op: opRenamed, Path: newPath, OldPath: oldPath, Dir: dir}
	if !dir {
		e.Size, e.Sha256 = w.describe(ev, newPath)
	}
	return []*agentv1.FileEvent{e}
}

// ignored reports whether p is under one of the ignored prefixes.
func (w *Watcher) ignored(p string) bool {
	return underAny(p, w.cfg.Ignore)
}

// describe returns a regular file's size and, up to 1 MiB, its sha256. The
// file is opened by its own handle when the event has one (it may have been
// renamed since), else by path; non-blocking, and checked to be regular,
// since the entry may be a FIFO by now.
func (w *Watcher) describe(ev rawEvent, p string) (int64, string) {
	fd := -1
	if rec, ok := ev.record(unix.FAN_EVENT_INFO_TYPE_FID); ok {
		if f, err := w.res.openFile(rec, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC); err == nil {
			fd = f
		}
	}
	if fd < 0 {
		f, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, ""
		}
		fd = f
	}
	defer unix.Close(fd)
	return w.hashFD(fd)
}

// hashFD is describe's size and sha256 of an open file. It works on the raw
// descriptor with one reused buffer: an *os.File would cost three more
// system calls per file (poller registration), dear under emulation.
func (w *Watcher) hashFD(fd int) (int64, string) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, ""
	}
	if st.Size > maxHashBytes {
		return st.Size, ""
	}
	if w.hashBuf == nil {
		w.hashBuf = make([]byte, 64<<10)
	}
	h := sha256.New()
	var n int64
	for n <= maxHashBytes {
		k, err := unix.Read(fd, w.hashBuf)
		if k > 0 {
			h.Write(w.hashBuf[:k])
			n += int64(k)
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return max(n, st.Size), ""
		}
		if k == 0 {
			return n, hex.EncodeToString(h.Sum(nil))
		}
	}
	return n, "" // it grew past the limit while read
}

// pathSet is a set of paths that forgets the oldest when full.
type pathSet struct {
	max   int
	order []string // insertion order; may hold removed paths
	set   map[string]bool
}

func newPathSet(max int) *pathSet { return &pathSet{max: max, set: map[string]bool{}} }

func (s *pathSet) add(p string) {
	if s.set[p] {
		return
	}
	if len(s.order) >= 2*s.max {
		s.prune(0)
	}
	if len(s.set) >= s.max {
		s.prune(len(s.set) / 2)
	}
	s.set[p] = true
	s.order = append(s.order, p)
}

// prune drops removed paths from order, and then the oldest drop paths.
func (s *pathSet) prune(drop int) {
	live := make([]string, 0, len(s.set))
	for _, p := range s.order {
		if s.set[p] {
			live = append(live, p)
		}
	}
	for _, p := range live[:drop] {
		delete(s.set, p)
	}
	s.order = live[drop:]
}

func (s *pathSet) remove(p string) bool {
	if !s.set[p] {
		return false
	}
	delete(s.set, p)
	return true
}
