package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/figures"
	"github.com/agentbox/agentbox/vmm"
)

// leakGrace is how long a resource hostd should have removed may take to
// go (a VMM exiting after SIGKILL, the reaper's next round) before it
// counts as leaked. It is waited only when something is left.
const leakGrace = 150 * time.Second

// The kinds of restart cycle, in the order they run (a short soak runs the
// first few). A fault step hands over from the running hostd with SIGTERM
// (its sandboxes run on), starts one with AGENTBOX_FAULT set to the step,
// and runs an operation that reaches it: that hostd kills itself with
// SIGKILL there, in the middle of the operation.
const (
	killExec   = "exec:started"
	killCreate = "create:booted"
	killStream = "mid-stream"
	killDelete = "delete:stopping"
	killRest   = "at rest"
)

var restartKinds = []string{killExec, killCreate, killStream, killDelete, killRest}

// watched is a sandbox the restarts must keep: files with a manifest, a
// counter process, its VMM.
type watched struct {
	id        string
	manifest  string
	counterID string
	counter   int
	vm        vmm.Process
}

// restarter runs the kill -9 / restart cycles against one hostd data dir.
type restarter struct {
	h      *hostdProc
	o      options
	sbs    []*watched
	before hostView // observed when the last hostd died
	// Results.
	starts     []time.Duration
	kinds      map[string]int
	lost       map[string]string // id → why
	leaks      []string
	settled    int // resources that went within leakGrace
	mismatches []string
	errs       []string
}

// soakRestarts kills hostd o.restarts times with sbs running, starts it
// again on the same data dir, and checks each time that every sandbox is
// re-adopted with its VMM, process and files, and that nothing of a
// sandbox that is gone (or of the dead hostd's warm pool) is left.
func soakRestarts(ctx context.Context, h *hostdProc, sbs []client.Sandbox, o options, tb *figures.Table) error {
	r := &restarter{h: h, o: o, kinds: map[string]int{}, lost: map[string]string{}}
	progress("restarts: %d kill -9 / restart cycles with %d sandboxes", o.restarts, len(sbs))
	links0, err := hostLinks()
	if err != nil {
		return err
	}
	for _, sb := range sbs {
		w, err := r.prepare(ctx, sb.ID)
		if err != nil {
			return fmt.Errorf("prepare %s: %w", sb.ID, err)
		}
		r.sbs = append(r.sbs, w)
	}
	var runErr error
	for i := range o.restarts {
		kind := o.kinds[i%len(o.kinds)]
		progress("restarts: cycle %d of %d: %s", i+1, o.restarts, kind)
		if runErr = r.cycle(ctx, i, kind); runErr != nil {
			runErr = fmt.Errorf("cycle %d (%s): %w", i+1, kind, runErr)
			break
		}
	}
	links1, err := hostLinks()
	if err != nil {
		runErr = errors.Join(runErr, err)
	}
	for _, l := range links1 {
		if !slices.Contains(links0, l) {
			r.leaks = append(r.leaks, l)
		}
	}
	r.rows(tb)
	return runErr
}

// prepare writes o.files files with a manifest in sandbox id and starts a
// counter process there.
func (r *restarter) prepare(ctx context.Context, id string) (*watched, error) {
	w := &watched{id: id}
	fill := fmt.Sprintf(`set -e; rm -rf /root/rs; mkdir /root/rs; cd /root/rs
i=0; while [ $i -lt %d ]; do i=$((i+1)); head -c $((i*89 %% 8192 + 1)) /dev/urandom > f$i; done
sync; sha256sum f* | sort`, r.o.files)
	var err error
	if w.manifest, err = run1(ctx, r.h.c, id, fill); err != nil {
		return nil, err
	}
	if w.counterID, err = r.h.c.ExecBackground(ctx, id, client.ExecRequest{Cmd: []string{"sh", "-c", counterScript(restartCounter)}}); err != nil {
		return nil, err
	}
	if w.counter, err = waitCounter(ctx, r.h.c, id, restartCounter); err != nil {
		return nil, err
	}
	w.vm, err = recordedVM(r.h.dataDir(), id)
	return w, err
}

const restartCounter = "/root/rcounter"

// cycle kills hostd as kind says, starts a clean one and checks every
// sandbox and the host. An error stops the cycles (no hostd to go on
// with); what merely failed a goal is counted.
func (r *restarter) cycle(ctx context.Context, i int, kind string) error {
	r.kinds[kind]++
	var after func(context.Context) // a check once the clean hostd is up
	var err error
	switch kind {
	case killRest:
		err = r.killNow()
	case killStream:
		after, err = r.midStream(ctx)
	default:
		after, err = r.atFault(ctx, i, kind)
	}
	if err != nil {
		return err
	}
	if err := r.startAndCheck(ctx, ""); err != nil {
		return err
	}
	r.verify(ctx)
	if after != nil {
		after(ctx)
	}
	return nil
}

// killNow kills hostd with SIGKILL by its pid and observes what it left.
func (r *restarter) killNow() error {
	if err := r.h.kill(); err != nil {
		return err
	}
	return r.observeDead()
}

// observeDead records what is on the host while no hostd runs.
func (r *restarter) observeDead() error {
	v, err := observe(r.h.dataDir())
	r.before = v
	return err
}

// startAndCheck starts hostd (with faultStep), times it, and checks that
// nothing the dead one left is there any more unless a sandbox owns it.
func (r *restarter) startAndCheck(ctx context.Context, faultStep string) error {
	d, err := r.h.start(ctx, faultStep)
	if err != nil {
		return fmt.Errorf("hostd start: %w", err)
	}
	r.starts = append(r.starts, d)
	before := r.before
	left, waited, err := r.leaksAfter(ctx, before)
	if err != nil {
		return fmt.Errorf("leak check: %w", err)
	}
	if len(left) > 0 {
		r.leaks = append(r.leaks, left...)
	} else if waited >= 2*time.Second {
		r.settled++
	}
	return nil
}

// expected asks hostd which sandboxes it lists and reads the VMM it
// recorded for each running one.
func (r *restarter) expected(ctx context.Context) (expected, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	list, err := r.h.c.ListSandboxes(ctx)
	if err != nil {
		return expected{}, err
	}
	want := expected{listed: map[string]bool{}, running: map[string]vmm.Process{}}
	for _, sb := range list {
		want.listed[sb.ID] = true
		if sb.State == "running" {
			p, err := recordedVM(r.h.dataDir(), sb.ID)
			if err != nil {
				return want, err
			}
			want.running[sb.ID] = p
		}
	}
	return want, nil
}

// verify checks every watched sandbox after a restart: running, the same
// VMM process, answering an exec, its counter process running and
// counting, its files as written. A sandbox that fails one of the first
// three is lost (and no longer watched).
func (r *restarter) verify(ctx context.Context) {
	for _, w := range r.sbs {
		if _, gone := r.lost[w.id]; gone {
			continue
		}
		if why := r.lostWhy(ctx, w); why != "" {
			r.lost[w.id] = why
			r.keepConsole(w.id)
			continue
		}
		n, err := r.counterAdvanced(ctx, w)
		if err != nil {
			r.mismatches = append(r.mismatches, fmt.Sprintf("%s: counter process: %v", w.id, err))
		} else {
			w.counter = n
		}
		now, err := run1(ctx, r.h.c, w.id, "cd /root/rs && sha256sum f* | sort")
		if err != nil {
			r.mismatches = append(r.mismatches, fmt.Sprintf("%s: checksums: %v", w.id, err))
		} else if d := diffLines(w.manifest, now); d > 0 {
			r.mismatches = append(r.mismatches, fmt.Sprintf("%s: %d files changed or lost", w.id, d))
		}
	}
}

// lostWhy says why sandbox w was not re-adopted, or "".
func (r *restarter) lostWhy(ctx context.Context, w *watched) string {
	ctx, cancel := context.WithTimeout(ctx, 2*opTimeout)
	defer cancel()
	sb, err := r.h.c.GetSandbox(ctx, w.id)
	if err != nil {
		return "get: " + err.Error()
	}
	if sb.State != "running" {
		return fmt.Sprintf("%s: %s", sb.State, sb.Error)
	}
	p, err := recordedVM(r.h.dataDir(), w.id)
	if err != nil {
		return err.Error()
	}
	if p != w.vm {
		return fmt.Sprintf("vmm pid %d replaced by pid %d", w.vm.PID, p.PID)
	}
	if err := execOnce(ctx, r.h.c, w.id, "readopted"); err != nil {
		return "exec: " + err.Error()
	}
	return ""
}

// keepConsole copies the guest console log of lost sandbox id out of the
// scratch dir, for the post-mortem.
func (r *restarter) keepConsole(id string) {
	b, err := os.ReadFile(filepath.Join(r.h.dataDir(), "sandboxes", id, "console.log"))
	if err != nil {
		return
	}
	kept := filepath.Join(os.TempDir(), "ab-soak-"+id+"-console.log")
	if os.WriteFile(kept, b, 0o644) == nil {
		progress("sandbox %s lost; its console log is in %s", id, kept)
	}
}

// counterAdvanced checks that w's counter session still runs and that the
// counter went on since it was last read (it counts every 0.1 s; it is
// read again for a while before that counts as stopped, for a loaded
// host).
func (r *restarter) counterAdvanced(ctx context.Context, w *watched) (int, error) {
	running, err := sessionRunning(ctx, r.h.c, w.id, w.counterID)
	if err != nil {
		return 0, err
	}
	if !running {
		return 0, errors.New("the session is not running")
	}
	for range 30 {
		n, err := readCounter(ctx, r.h.c, w.id, restartCounter)
		if err != nil {
			return 0, err
		}
		if n > w.counter {
			return n, nil
		}
		time.Sleep(time.Second)
	}
	return 0, fmt.Errorf("the counter stays at %d", w.counter)
}

// live is the first watched sandbox not lost (the cycles' operations run
// there).
func (r *restarter) live() (*watched, error) {
	for _, w := range r.sbs {
		if _, gone := r.lost[w.id]; !gone {
			return w, nil
		}
	}
	return nil, errors.New("every sandbox is lost")
}

func (r *restarter) fail(format string, a ...any) { r.errs = append(r.errs, fmt.Sprintf(format, a...)) }

func (r *restarter) rows(tb *figures.Table) {
	var kinds []string
	cycles := 0
	for _, k := range restartKinds {
		cycles += r.kinds[k]
		if r.kinds[k] > 0 {
			kinds = append(kinds, fmt.Sprintf("%d %s", r.kinds[k], k))
		}
	}
	name := fmt.Sprintf("hostd kill -9 / restart %d cycles, %d sandboxes", cycles, len(r.sbs))
	tb.Add(name+": hostd start to serving, p50 / p99", figures.P50P99(r.starts),
		fmt.Sprintf("%d starts (re-adoption included); killed: %s", len(r.starts), strings.Join(kinds, ", ")))
	var lost []string
	for id, why := range r.lost {
		lost = append(lost, id+": "+why)
	}
	slices.Sort(lost)
	tb.Goal(name+": sandboxes lost", len(r.lost), "not running, another VMM, or no exec answer"+firstOf(lost))
	tb.Goal(name+": leaked resources", len(r.leaks), fmt.Sprintf("VMMs, namespaces (taps, nftables), cgroups, dirs of gone sandboxes; %d times some went only after a wait%s", r.settled, firstOf(r.leaks)))
	tb.Goal(name+": mismatches", len(r.mismatches), "files, counter process, output across a restart, the cut exec's effect"+firstOf(r.mismatches))
	tb.Goal(name+": errors", len(r.errs), "fault points not reached, operations failing"+firstOf(r.errs))
}

// firstOf is "; first: " and the first of list, or "".
func firstOf(list []string) string {
	if len(list) == 0 {
		return ""
	}
	more := ""
	if len(list) > 1 {
		more = fmt.Sprintf(" (+%d more)", len(list)-1)
	}
	return "; first: " + list[0] + more
}
