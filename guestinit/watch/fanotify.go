package watch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// This file parses fanotify's event stream in FID mode (FAN_REPORT_DFID_NAME)
// by hand. There is no maintained Go library for FID mode: the common ones
// (e.g. fsnotify) use inotify, and the fanotify wrappers that exist only
// handle the older fd-per-event mode, where create, delete and rename cannot
// be reported at all. The layouts below are those of <linux/fanotify.h>.

// markMask is what the watcher asks fanotify for. FAN_RENAME (Linux 5.17+)
// reports a rename as one event carrying both the old and the new name.
// FAN_ATTRIB reports a chmod, chown or touch that writes nothing, and
// FAN_MODIFY a write by a process that keeps the file open (no
// FAN_CLOSE_WRITE yet); the kernel merges a write's MODIFY into the
// CREATE and CLOSE_WRITE of the same name still queued.
const markMask = unix.FAN_CREATE | unix.FAN_DELETE | unix.FAN_CLOSE_WRITE | unix.FAN_RENAME | unix.FAN_ONDIR |
	unix.FAN_ATTRIB | unix.FAN_MODIFY

// initFlags are fanotify_init's flags: notification only, events identified
// by the parent directory's file handle plus the entry name.
const initFlags = unix.FAN_CLASS_NOTIF | unix.FAN_REPORT_DFID_NAME | unix.FAN_CLOEXEC | unix.FAN_NONBLOCK

// targetFlags (Linux 5.17+) add the handle of the entry itself to create,
// delete and rename events. The watcher caches a created directory's
// handle from it, so the events inside a directory that is deleted before
// they are read still resolve (its handle is stale by then).
const targetFlags = unix.FAN_REPORT_FID | unix.FAN_REPORT_TARGET_FID

// Sizes of the kernel structures.
const (
	metadataLen   = 24 // struct fanotify_event_metadata
	infoHeaderLen = 4  // struct fanotify_event_info_header
	fidHeaderLen  = infoHeaderLen + 8 + 8
	// fidHeaderLen: header, __kernel_fsid_t, then struct file_handle's
	// handle_bytes and handle_type before f_handle.
)

var errShortEvent = errors.New("watch: truncated fanotify event")

// rawEvent is one fanotify event: what happened and the directory entries it
// names (one for most events, the old and the new one for a rename).
type rawEvent struct {
	mask uint64
	pid  int
	recs []fidRecord
}

// fidRecord is one FID info record: a directory's file handle on the
// filesystem fsid, plus the name of an entry in it.
type fidRecord struct {
	typ    uint8 // FAN_EVENT_INFO_TYPE_*
	fsid   [2]int32
	htype  int32
	handle []byte
	name   string
}

// key identifies the directory of a record (for the path cache).
func (r fidRecord) key() string {
	return fmt.Sprintf("%x.%x.%x.%x", r.fsid[0], r.fsid[1], r.htype, r.handle)
}

// record returns the event's record of type typ, if it has one.
func (e rawEvent) record(typ uint8) (fidRecord, bool) {
	for _, r := range e.recs {
		if r.typ == typ {
			return r, true
		}
	}
	return fidRecord{}, false
}

// parseEvents parses a buffer that read(2) filled from a fanotify fd.
func parseEvents(buf []byte) ([]rawEvent, error) {
	var out []rawEvent
	for len(buf) > 0 {
		if len(buf) < metadataLen {
			return out, errShortEvent
		}
		ne := binary.NativeEndian
		evLen := int(ne.Uint32(buf[0:]))
		vers := buf[4]
		metaLen := int(ne.Uint16(buf[6:]))
		if vers != unix.FANOTIFY_METADATA_VERSION {
			return out, fmt.Errorf("watch: fanotify metadata version %d, want %d", vers, unix.FANOTIFY_METADATA_VERSION)
		}
		if evLen < metaLen || metaLen < metadataLen || evLen > len(buf) {
			return out, errShortEvent
		}
		ev := rawEvent{mask: ne.Uint64(buf[8:]), pid: int(int32(ne.Uint32(buf[20:])))}
		recs, err := parseRecords(buf[metaLen:evLen])
		if err != nil {
			return out, err
		}
		ev.recs = recs
		out = append(out, ev)
		buf = buf[evLen:]
	}
	return out, nil
}

// parseRecords parses the info records that follow an event's metadata,
// skipping the types the watcher does not use.
func parseRecords(b []byte) ([]fidRecord, error) {
	var out []fidRecord
	for len(b) > 0 {
		if len(b) < infoHeaderLen {
			return out, errShortEvent
		}
		typ := b[0]
		n := int(binary.NativeEndian.Uint16(b[2:]))
		if n < infoHeaderLen || n > len(b) {
			return out, errShortEvent
		}
		switch typ {
		case unix.FAN_EVENT_INFO_TYPE_DFID_NAME, unix.FAN_EVENT_INFO_TYPE_DFID,
			unix.FAN_EVENT_INFO_TYPE_FID,
			unix.FAN_EVENT_INFO_TYPE_OLD_DFID_NAME, unix.FAN_EVENT_INFO_TYPE_NEW_DFID_NAME:
			r, err := parseFID(typ, b[:n])
			if err != nil {
				return out, err
			}
			out = append(out, r)
		}
		b = b[n:]
	}
	return out, nil
}

// parseFID parses one struct fanotify_event_info_fid, whose file handle is
// followed, for the *_NAME types, by a NUL-terminated entry name.
func parseFID(typ uint8, b []byte) (fidRecord, error) {
	if len(b) < fidHeaderLen {
		return fidRecord{}, errShortEvent
	}
	ne := binary.NativeEndian
	r := fidRecord{
		typ:   typ,
		fsid:  [2]int32{int32(ne.Uint32(b[4:])), int32(ne.Uint32(b[8:]))},
		htype: int32(ne.Uint32(b[16:])),
	}
	hlen := int(ne.Uint32(b[12:]))
	if fidHeaderLen+hlen > len(b) {
		return fidRecord{}, errShortEvent
	}
	r.handle = bytes.Clone(b[fidHeaderLen : fidHeaderLen+hlen])
	name := b[fidHeaderLen+hlen:]
	if i := bytes.IndexByte(name, 0); i >= 0 {
		name = name[:i]
	}
	r.name = string(name)
	return r, nil
}
