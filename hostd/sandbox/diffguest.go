package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/agent/agentclient"
)

// The guest side of a diff is the agent's Diff service (guestinit/agent/
// diff.go): stats with digests, and walks of the tree in path order. It is
// no exec of the sandbox's: the flight recorder does not log it and `ps`
// does not list it. agentclient checks every answer (the guest is
// untrusted) and pages through it.

// Bounds of what a diff asks a guest.
const (
	// maxDigestBytes bounds the files the guest hashes: a larger one is
	// compared by its size and mtime.
	maxDigestBytes = 256 << 20
	// guestTimeout bounds one side's walk or stats for a page.
	guestTimeout = 10 * time.Minute
)

// ErrGuestNoDiff is a guest whose agent predates the Diff service (a
// snapshot taken by an older guestinit).
var ErrGuestNoDiff = errors.New("sandbox: diff: the guest's agent has no Diff service (a snapshot of an older guest): restore it with this hostd's guest, or compare it by method=journal")

// fileRec is one guest entry as its side reports it. Path and Link are
// the guest's bytes.
type fileRec struct {
	Path string
	Type string // "f", "d", "l", "o"; "" when missing
	Mode uint32
	UID  int
	GID  int
	Size int64
	// MTime is zero where unknown (a journal record).
	MTime time.Time
	// SHA256 is "" for a file the guest did not hash (NoDigest says so).
	SHA256   string
	NoDigest bool
	Link     string
	Missing  bool
	// Journal marks a record known only from the flight recorder (a
	// paused side): no mode, owner or content.
	Journal bool
}

var shortTypes = map[string]string{agentclient.DiffFile: "f", agentclient.DiffDir: "d", agentclient.DiffSymlink: "l", agentclient.DiffOther: "o"}

func recOf(e agentclient.DiffEntry) fileRec {
	if e.Type == "" {
		return fileRec{Path: e.Path, Missing: true}
	}
	return fileRec{Path: e.Path, Type: shortTypes[e.Type], Mode: e.Mode, UID: int(e.UID), GID: int(e.GID), Size: e.Size,
		MTime: e.MTime, SHA256: e.SHA256, NoDigest: e.Type == agentclient.DiffFile && e.SHA256 == "", Link: e.Link}
}

// guestErr names an agent without the Diff service.
func guestErr(err error) error {
	if errors.Is(err, agentclient.ErrNoDiff) {
		return fmt.Errorf("%w: %w", ErrGuestNoDiff, err)
	}
	return fmt.Errorf("sandbox: diff: the guest: %w", err)
}

// guestStat calls emit with c's guest's record of each of paths.
func guestStat(ctx context.Context, c *agentclient.Client, paths []string, emit func(fileRec)) error {
	ctx, cancel := context.WithTimeout(ctx, guestTimeout)
	defer cancel()
	if err := c.DiffStat(ctx, paths, maxDigestBytes, func(e agentclient.DiffEntry) error { emit(recOf(e)); return nil }); err != nil {
		return guestErr(err)
	}
	return nil
}

// walkReq is a walk of a guest's tree (MaxDigest is set by guestWalk).
type walkReq = agentclient.DiffWalkRequest

// guestWalk calls emit with the entries of c's guest's walk, in path
// order; more reports that the walk stopped at its limit, at next.
func guestWalk(ctx context.Context, c *agentclient.Client, q walkReq, emit func(fileRec)) (more bool, next string, err error) {
	ctx, cancel := context.WithTimeout(ctx, guestTimeout)
	defer cancel()
	q.MaxDigest = maxDigestBytes
	more, next, err = c.DiffWalk(ctx, q, func(e agentclient.DiffEntry) error { emit(recOf(e)); return nil })
	if err != nil {
		return false, "", guestErr(err)
	}
	return more, next, nil
}
