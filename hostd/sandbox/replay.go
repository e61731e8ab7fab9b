package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// Bounds of a replay.
const (
	MaxReplayRuns = 32
	// replayParallel is how many restores of a replay run at once.
	replayParallel = 2
	// maxReplayOutput bounds each stream a replay run keeps.
	maxReplayOutput = 1 << 20
)

// ReplayRequest restores a snapshot N times and runs one command in each.
type ReplayRequest struct {
	SnapshotID string
	Cmd        []string
	N          int
	Env        map[string]string
	Cwd        string
	TimeoutS   int
	Caller     string
	// Keep leaves the sandboxes running (else each is deleted after its run).
	Keep bool
}

// ReplayRun is one restore's run.
type ReplayRun struct {
	Index      int
	SandboxID  string
	ExitCode   int
	Signal     string
	Stdout     []byte
	Stderr     []byte
	Truncated  bool
	DurationMS int64
	Error      string
	// Group numbers the distinct outcomes (exit code and both outputs),
	// from 0 for the first run's.
	Group int
}

// ReplayEvent is one step of a replay's progress: a run "started" (its
// sandbox restored) or "finished".
type ReplayEvent struct {
	Type string
	Run  ReplayRun
}

// ReplayResult is every run, and whether their outcomes differ.
type ReplayResult struct {
	Runs   []ReplayRun
	Groups int
	Differ bool
}

// Replay restores snapshot req.SnapshotID req.N times (replayParallel at a
// time), runs req.Cmd in each, and reports each run through progress as it
// starts and ends, then the runs grouped by outcome.
func (m *Manager) Replay(ctx context.Context, req ReplayRequest, progress func(ReplayEvent)) (ReplayResult, error) {
	if req.N < 1 || req.N > MaxReplayRuns {
		return ReplayResult{}, fmt.Errorf("%w: n must be 1..%d", ErrInvalid, MaxReplayRuns)
	}
	if len(req.Cmd) == 0 {
		return ReplayResult{}, fmt.Errorf("%w: cmd is empty", ErrInvalid)
	}
	if _, err := m.opts.Store.GetSnapshot(ctx, req.SnapshotID); err != nil {
		return ReplayResult{}, snapshotNotFound(err, req.SnapshotID)
	}
	var mu sync.Mutex
	report := func(ev ReplayEvent) {
		mu.Lock()
		defer mu.Unlock()
		if progress != nil {
			progress(ev)
		}
	}
	runs := make([]ReplayRun, req.N)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(replayParallel)
	for i := range req.N {
		g.Go(func() error {
			runs[i] = m.replayOne(gctx, req, i, report)
			return gctx.Err()
		})
	}
	if err := g.Wait(); err != nil {
		return ReplayResult{}, err
	}
	return groupRuns(runs), nil
}

// replayOne restores the snapshot, runs the command and (unless kept)
// deletes the sandbox; a failure is the run's Error.
func (m *Manager) replayOne(ctx context.Context, req ReplayRequest, i int, report func(ReplayEvent)) ReplayRun {
	run := ReplayRun{Index: i}
	info, err := m.create(ctx, CreateOptions{Snapshot: req.SnapshotID, Caller: req.Caller,
		Metadata: map[string]string{"replay_of": req.SnapshotID, "replay_index": fmt.Sprint(i)}})
	run.SandboxID = info.ID
	if info.ID != "" && !req.Keep {
		defer func() { _ = m.Delete(context.WithoutCancel(ctx), info.ID) }()
	}
	if err != nil {
		run.Error = err.Error()
		report(ReplayEvent{Type: "finished", Run: run})
		return run
	}
	report(ReplayEvent{Type: "started", Run: run})
	x := &Execs{boxes: m, rec: &m.rec, timeouts: m.timeouts, metrics: m.opts.Metrics}
	t0 := time.Now()
	keep := func(dst *[]byte, b []byte) {
		if room := maxReplayOutput - len(*dst); room < len(b) {
			b, run.Truncated = b[:max(room, 0)], true
		}
		*dst = append(*dst, b...)
	}
	err = x.Exec(ctx, info.ID, ExecRequest{Cmd: req.Cmd, Env: req.Env, Cwd: req.Cwd, TimeoutS: req.TimeoutS, Collect: true}, func(ev ExecEvent) error {
		switch ev.Type {
		case EventStdout:
			keep(&run.Stdout, ev.Data)
		case EventStderr:
			keep(&run.Stderr, ev.Data)
		case EventExit:
			run.ExitCode, run.Signal = ev.ExitCode, ev.Signal
		}
		return nil
	})
	run.DurationMS = time.Since(t0).Milliseconds()
	if err != nil {
		run.Error = err.Error()
	}
	report(ReplayEvent{Type: "finished", Run: run})
	return run
}

// groupRuns numbers the distinct outcomes in the order they first appear.
func groupRuns(runs []ReplayRun) ReplayResult {
	var keys []string
	for i := range runs {
		r := &runs[i]
		h := sha256.New()
		fmt.Fprintf(h, "%d\x00%s\x00%s\x00", r.ExitCode, r.Signal, r.Error)
		h.Write(r.Stdout)
		h.Write([]byte{0})
		h.Write(r.Stderr)
		k := hex.EncodeToString(h.Sum(nil))
		g := slices.Index(keys, k)
		if g < 0 {
			g = len(keys)
			keys = append(keys, k)
		}
		r.Group = g
	}
	return ReplayResult{Runs: runs, Groups: len(keys), Differ: len(keys) > 1}
}
