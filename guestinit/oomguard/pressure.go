package oomguard

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// The pressure guard kills before the kernel would. The commands' cgroup
// has a memory.high a little below its memory.max: past it the kernel
// reclaims the cgroup's pages and throttles its allocations, time that
// PSI counts as the cgroup's memory stall. A hog that keeps allocating
// stalls without end; a build whose working set fits pays a short
// reclaim and drops back below memory.high. The guard kills the cgroup's
// largest process when the cgroup is at memory.high and its stall passes
// Trigger in PressureRounds windows in a row (about three seconds), and
// reports the kill with reason "pressure". It also kills, without
// waiting for PSI, when the cgroup has stayed at memory.high for AnonHold
// with anonymous memory filling AnonShare of it: the guest has no swap,
// so that memory cannot be reclaimed, and what is left of memory.high is
// the page cache of the programs running, whose reclaim is the thrash
// (PSI under TCG counts much of it as CPU time, not as stall).

// Trigger is the PSI trigger armed on the cgroup's memory.pressure: some
// task of the cgroup stalled on memory 300 ms within a 1 s window.
const Trigger = "some 300000 1000000"

// PressureRounds is how many windows in a row the trigger must fire, with
// the cgroup at its memory.high, before the guard kills.
const PressureRounds = 3

// AnonHold and AnonShare: the cgroup at memory.high for AnonHold with its
// anonymous memory at least AnonShare (in sixteenths) of memory.high.
const (
	AnonHold  = 3 * time.Second
	AnonShare = 14
)

// KmsgTag starts the line the guard writes to the kernel log for each
// kill, with the time the cgroup had been at memory.high.
const KmsgTag = "agentbox-oomguard:"

// HighFor is the memory.high of a cgroup whose memory.max is limit: a
// sixteenth below it, at most 32 MiB.
func HighFor(limit int64) int64 {
	return limit - min(limit/16, 32<<20)
}

// Guard watches one cgroup's memory pressure (Run).
type Guard struct {
	Dir      string // the cgroup (agent.ExecCgroup)
	Sink     Sink
	Sessions Sessions
	Kmsg     string // where to write KmsgTag lines ("": nowhere)
	Proc     string // procfs ("/proc")
}

// Run arms the trigger and kills on sustained pressure until the cgroup's
// pressure file fails. It returns at once if PSI is missing.
func (g *Guard) Run() error {
	pf, err := os.OpenFile(filepath.Join(g.Dir, "memory.pressure"), os.O_RDWR|syscall.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("oomguard: %w", err)
	}
	defer pf.Close()
	if _, err := pf.Write([]byte(Trigger)); err != nil {
		return fmt.Errorf("oomguard: arm PSI trigger: %w", err)
	}
	ef, err := os.Open(filepath.Join(g.Dir, "memory.events"))
	if err != nil {
		return fmt.Errorf("oomguard: %w", err)
	}
	defer ef.Close()
	var (
		rounds   int
		anonFrom time.Time // when anonymous memory was first seen filling memory.high
		last     time.Time // the trigger's last firing at the limit
		overFrom time.Time // when the cgroup was first seen at memory.high
		highs    = eventCount(ef, "high")
	)
	fds := []unix.PollFd{{Fd: int32(pf.Fd()), Events: unix.POLLPRI}, {Fd: int32(ef.Fd()), Events: unix.POLLPRI}}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		if _, err := unix.Poll(fds, 1000); err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("oomguard: poll: %w", err)
		}
		if fds[0].Revents&unix.POLLERR != 0 {
			return errors.New("oomguard: the cgroup's pressure file went away")
		}
		now := time.Now()
		if n := eventCount(ef, "high"); n > highs && overFrom.IsZero() {
			overFrom = now // the kernel reclaimed for memory.high: at the limit
		}
		highs = eventCount(ef, "high")
		at := g.atHigh()
		if !at {
			overFrom, anonFrom, rounds = time.Time{}, time.Time{}, 0
			continue
		}
		if overFrom.IsZero() {
			overFrom = now
		}
		if !g.anonFull() {
			anonFrom = time.Time{}
		} else if anonFrom.IsZero() {
			anonFrom = now
		} else if now.Sub(anonFrom) >= AnonHold {
			g.kill(now.Sub(overFrom))
			rounds, overFrom, anonFrom = 0, time.Time{}, time.Time{}
			continue
		}
		if fds[0].Revents&unix.POLLPRI == 0 {
			continue
		}
		if now.Sub(last) > 2*time.Second {
			rounds = 0
		}
		rounds++
		last = now
		if rounds < PressureRounds {
			continue
		}
		g.kill(now.Sub(overFrom))
		rounds, overFrom, anonFrom = 0, time.Time{}, time.Time{}
	}
}

// anonFull reports whether the cgroup's anonymous memory fills AnonShare
// sixteenths of its memory.high.
func (g *Guard) anonFull() bool {
	high, err := readInt(filepath.Join(g.Dir, "memory.high"))
	if err != nil || high <= 0 {
		return false
	}
	return statValue(filepath.Join(g.Dir, "memory.stat"), "anon") >= high/16*AnonShare
}

// statValue reads key's value from a memory.stat file (0 if absent).
func statValue(path, key string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	return eventCount(f, key)
}

// atHigh reports whether the cgroup's memory is at its memory.high.
func (g *Guard) atHigh() bool {
	cur, err1 := readInt(filepath.Join(g.Dir, "memory.current"))
	high, err2 := readInt(filepath.Join(g.Dir, "memory.high"))
	return err1 == nil && err2 == nil && high > 0 && cur >= high-(1<<20)
}

// kill ends the cgroup's largest process and reports it.
func (g *Guard) kill(over time.Duration) {
	pid, rssKiB := g.largest()
	if pid <= 1 {
		return
	}
	comm, _ := os.ReadFile(filepath.Join(g.Proc, strconv.Itoa(pid), "comm"))
	name := strings.ToValidUTF8(strings.TrimSpace(string(comm)), "?")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return
	}
	ev := &agentv1.GuestEvent{TimeUnixNano: time.Now().UnixNano(), Pid: int32(pid),
		Kind: &agentv1.GuestEvent_Oom{Oom: &agentv1.OOMEvent{Name: name, Reason: "pressure", RssKib: rssKiB}}}
	if g.Sessions != nil {
		ev.ExecId = g.Sessions.SessionOf(pid)
	}
	g.Sink.Add(ev)
	if g.Kmsg != "" {
		msg := fmt.Sprintf("%s killed process %d (%s) anon-rss:%dkB at memory.high for %dms\n", KmsgTag, pid, name, rssKiB, over.Milliseconds())
		_ = os.WriteFile(g.Kmsg, []byte(msg), 0)
	}
}

// largest returns the pid in the cgroup (or below it) with the most
// resident memory, and that memory in KiB.
func (g *Guard) largest() (int, int64) {
	best, bestRSS := 0, int64(-1)
	_ = filepath.WalkDir(g.Dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		b, _ := os.ReadFile(path)
		for _, f := range strings.Fields(string(b)) {
			pid, _ := strconv.Atoi(f)
			if rss := rssKiB(g.Proc, pid); pid > 1 && rss > bestRSS {
				best, bestRSS = pid, rss
			}
		}
		return nil
	})
	return best, max(bestRSS, 0)
}

// rssKiB is a process's resident memory (statm's second field, in pages).
func rssKiB(proc string, pid int) int64 {
	b, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "statm"))
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return -1
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return -1
	}
	return pages * int64(os.Getpagesize()) >> 10
}

// eventCount reads key's count from a memory.events file held open.
func eventCount(f *os.File, key string) int64 {
	if _, err := f.Seek(0, 0); err != nil {
		return 0
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), " ")
		if k == key {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(b))
	if s == "max" {
		return 0, nil
	}
	return strconv.ParseInt(s, 10, 64)
}
