package agentclient

import (
	"context"
	"time"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// GuestEvents is one batch of guest events.
type GuestEvents struct {
	Events     []GuestEvent
	Head, Lost uint64
	WatchError string
}

// GuestEvent is a file or package event seen in the guest.
type GuestEvent struct {
	Seq     uint64
	Time    time.Time
	ExecID  string
	PID     int
	File    *FileEvent // one of File, Package
	Package *PackageEvent
}

// FileEvent is a file the guest saw created, modified, deleted or renamed.
type FileEvent struct {
	Op, Path, OldPath string
	Dir               bool
	Size              int64
	SHA256            string
}

// PackageEvent is a package the guest saw installed, removed or upgraded.
type PackageEvent struct{ Manager, Action, Name, Version, OldVersion, Path string }

// NextEvents returns guest events above after (see the proto).
func (c *Client) NextEvents(ctx context.Context, after uint64, wait time.Duration, max int) (GuestEvents, error) {
	r, err := agentv1.NewEventsClient(c.conn).Next(ctx, &agentv1.NextEventsRequest{After: after, WaitMs: uint32(wait / time.Millisecond), Max: uint32(max)})
	if err != nil {
		return GuestEvents{}, err
	}
	out := GuestEvents{Head: r.Head, Lost: r.Lost, WatchError: r.WatchError}
	for _, e := range r.Events {
		ge := GuestEvent{Seq: e.Seq, Time: time.Unix(0, e.TimeUnixNano), ExecID: e.ExecId, PID: int(e.Pid)}
		if f := e.GetFile(); f != nil {
			ge.File = &FileEvent{Op: f.Op, Path: f.Path, OldPath: f.OldPath, Dir: f.Dir, Size: f.Size, SHA256: f.Sha256}
		}
		if p := e.GetPackage(); p != nil {
			ge.Package = &PackageEvent{Manager: p.Manager, Action: p.Action, Name: p.Name, Version: p.Version, OldVersion: p.OldVersion, Path: p.Path}
		}
		out.Events = append(out.Events, ge)
	}
	return out, nil
}
