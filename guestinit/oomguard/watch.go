package oomguard

import (
	"errors"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// Sink takes the OOM events (a watch.Ring).
type Sink interface{ Add(ev *agentv1.GuestEvent) }

// Sessions maps a pid to its exec session (agent.Exec).
type Sessions interface{ SessionOf(pid int) string }

// killed matches the kernel's OOM report ("Memory cgroup out of memory:
// Killed process 345 (tail) total-vm:…kB, anon-rss:…kB, …" or, for the
// whole guest, "Out of memory: Killed process …").
var killed = regexp.MustCompile(`^(Memory cgroup out of memory|Out of memory): Killed process (\d+) \((.{0,64})\) total-vm:\d+kB, anon-rss:(\d+)kB`)

// maxRecord bounds one kmsg record read (the kernel's own limit is 1 KiB
// of text plus its prefix and dictionary).
const maxRecord = 8192

// Watch reads the kernel log from kmsg (a /dev/kmsg, opened by the
// caller and positioned at its end) and adds an OOM event to sink for each
// process the kernel's OOM killer kills. It returns when kmsg fails.
func Watch(kmsg io.Reader, sink Sink, sessions Sessions) error {
	buf := make([]byte, maxRecord)
	for {
		n, err := kmsg.Read(buf)
		if errors.Is(err, syscall.EPIPE) {
			continue // records were overwritten before we read them
		}
		if errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.EAGAIN) {
			continue
		}
		if err != nil {
			return err
		}
		if ev := Parse(string(buf[:n])); ev != nil {
			if sessions != nil {
				ev.ExecId = sessions.SessionOf(int(ev.Pid))
			}
			sink.Add(ev)
		}
	}
}

// Parse returns the OOM event of one kmsg record ("prio,seq,usec,flags;text"
// and dictionary lines), or nil when it reports no OOM kill.
func Parse(record string) *agentv1.GuestEvent {
	_, text, ok := strings.Cut(record, ";")
	if !ok {
		return nil
	}
	text, _, _ = strings.Cut(text, "\n")
	m := killed.FindStringSubmatch(text)
	if m == nil {
		return nil
	}
	pid, _ := strconv.Atoi(m[2])
	rss, _ := strconv.ParseInt(m[4], 10, 64)
	reason := "global"
	if strings.HasPrefix(m[1], "Memory cgroup") {
		reason = "cgroup"
	}
	return &agentv1.GuestEvent{TimeUnixNano: time.Now().UnixNano(), Pid: int32(pid),
		Kind: &agentv1.GuestEvent_Oom{Oom: &agentv1.OOMEvent{Name: strings.ToValidUTF8(m[3], "?"), Reason: reason, RssKib: rss}}}
}

// OpenKmsg opens /dev/kmsg for reading from its end (the kills to come,
// not the boot's log).
func OpenKmsg(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
