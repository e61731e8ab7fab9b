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
	File    *FileEvent // one of File, Package, OOM
	Package *PackageEvent
	OOM     *OOMEvent
}

// OOMEvent is a process the guest killed for memory. Reason is cgroup
// (the user commands' memory cgroup was full), global (the whole guest
// was) or pressure (the agent's guard found the commands stalled on
// memory); RSSKiB is what it held.
type OOMEvent struct {
	Name, Reason string
	RSSKiB       int64
}

// FileEvent is a change to a file or directory: Op is created, modified,
// deleted or renamed (then OldPath is set). Size and SHA256 (hex, for
// regular files up to 1 MiB) describe the content when the guest read it.
type FileEvent struct {
	Op, Path, OldPath string
	Dir               bool
	Size              int64
	SHA256            string
}

// PackageEvent is a package that a manager (dpkg, pip or npm) installed,
// removed or upgraded (then OldVersion is set); Path is the metadata file
// it was detected from.
type PackageEvent struct{ Manager, Action, Name, Version, OldVersion, Path string }

// NextEvents returns guest events above after (see the proto): at most max
// (0: the guest's default), waiting up to wait for the first. An after above
// the guest's newest event returns no events and Head, where a new reader
// starts; Lost counts events above after that the guest no longer holds.
func (c *Client) NextEvents(ctx context.Context, after uint64, wait time.Duration, max int) (GuestEvents, error) {
	waitMs := min(wait.Milliseconds(), int64(^uint32(0)))
	if waitMs < 0 {
		waitMs = 0
	}
	if max < 0 {
		max = 0
	}
	r, err := c.events.Next(withWait(ctx, time.Duration(waitMs)*time.Millisecond), &agentv1.NextEventsRequest{After: after, WaitMs: uint32(waitMs), Max: uint32(max)})
	if err != nil {
		return GuestEvents{}, fromStatus(err)
	}
	if max == 0 {
		max = maxEventsDefault
	}
	// What a real agent would not send is dropped and counted as lost.
	evs := r.Events
	lost := r.Lost
	if len(evs) > max {
		lost += uint64(len(evs) - max)
		evs = evs[:max]
	}
	out := GuestEvents{Head: r.Head, WatchError: string(clip([]byte(r.WatchError), maxEventField)), Events: make([]GuestEvent, 0, len(evs))}
	for _, e := range evs {
		if !eventOK(e) {
			lost++
			continue
		}
		out.Events = append(out.Events, eventFrom(e))
	}
	out.Lost = lost
	return out, nil
}

// maxEventsDefault is the most events one Next returns when max is 0 (the
// guest's default).
const maxEventsDefault = 1024

// eventOK checks a guest event's sizes.
func eventOK(e *agentv1.GuestEvent) bool {
	if len(e.ExecId) > MaxID {
		return false
	}
	short := func(ss ...string) bool {
		for _, s := range ss {
			if len(s) > maxEventField {
				return false
			}
		}
		return true
	}
	paths := func(ss ...string) bool {
		for _, s := range ss {
			if len(s) > MaxPath {
				return false
			}
		}
		return true
	}
	if f := e.GetFile(); f != nil {
		return short(f.Op, f.Sha256) && paths(f.Path, f.OldPath)
	}
	if p := e.GetPackage(); p != nil {
		return short(p.Manager, p.Action, p.Name, p.Version, p.OldVersion) && paths(p.Path)
	}
	if o := e.GetOom(); o != nil {
		return short(o.Name, o.Reason) && o.RssKib >= 0
	}
	return true
}

func eventFrom(e *agentv1.GuestEvent) GuestEvent {
	g := GuestEvent{Seq: e.Seq, Time: time.Unix(0, e.TimeUnixNano), ExecID: e.ExecId, PID: int(e.Pid)}
	if f := e.GetFile(); f != nil {
		g.File = &FileEvent{Op: f.Op, Path: f.Path, OldPath: f.OldPath, Dir: f.Dir, Size: f.Size, SHA256: f.Sha256}
	}
	if p := e.GetPackage(); p != nil {
		g.Package = &PackageEvent{Manager: p.Manager, Action: p.Action, Name: p.Name, Version: p.Version, OldVersion: p.OldVersion, Path: p.Path}
	}
	if o := e.GetOom(); o != nil {
		g.OOM = &OOMEvent{Name: o.Name, Reason: o.Reason, RSSKiB: o.RssKib}
	}
	return g
}
