package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/client"
)

// streamScript prints lines, pauses (hostd is killed in the pause), and
// prints more: the client re-attaches to the next hostd at its offset.
const (
	streamHalf  = 2000
	streamLines = 4000
)

var streamScript = fmt.Sprintf("seq -f line-%%g 1 %d; sleep 3; seq -f line-%%g %d %d", streamHalf, streamHalf+1, streamLines)

// midStream kills hostd with SIGKILL while an exec streams its output to
// the client; after the restart the client re-attaches at the offset it
// had and must get the rest, no byte lost or repeated.
func (r *restarter) midStream(ctx context.Context) (func(context.Context), error) {
	w, err := r.live()
	if err != nil {
		return nil, err
	}
	c := r.h.c
	execID, err := c.ExecBackground(ctx, w.id, client.ExecRequest{Cmd: []string{"sh", "-c", streamScript}})
	if err != nil {
		return nil, fmt.Errorf("exec: %w", err)
	}
	var out bytes.Buffer
	var once sync.Once
	seen := make(chan struct{})
	res := make(chan error, 1)
	go func() {
		_, err := follow(ctx, c, w.id, execID, 0, &out, func() { once.Do(func() { close(seen) }) })
		res <- err
	}()
	select {
	case <-seen:
	case err := <-res:
		return nil, fmt.Errorf("the stream ended before any output: %v", err)
	}
	if err := r.killNow(); err != nil {
		return nil, err
	}
	<-res // cut by the kill (or ended just before it: the rest is empty)
	return func(ctx context.Context) {
		exited, err := follow(ctx, r.h.c, w.id, execID, int64(out.Len()), &out, nil)
		if err != nil || !exited {
			r.mismatches = append(r.mismatches, fmt.Sprintf("%s: re-attach after the restart: exited %v, %v", w.id, exited, err))
			return
		}
		var want strings.Builder
		for i := 1; i <= streamLines; i++ {
			fmt.Fprintf(&want, "line-%d\n", i)
		}
		if out.String() != want.String() {
			r.mismatches = append(r.mismatches, fmt.Sprintf("%s: output across the restart: %d bytes, want %d", w.id, out.Len(), want.Len()))
		}
	}, nil
}

// follow attaches to session execID from offset, appending its output to
// out (calling onData after each chunk), until it exits zero (true) or the
// stream ends (false).
func follow(ctx context.Context, c *client.Client, id, execID string, offset int64, out *bytes.Buffer, onData func()) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	exited := false
	err := c.Attach(ctx, id, execID, offset, func(ev client.Event) error {
		if len(ev.Data) > 0 {
			if ev.Offset != int64(out.Len()) {
				return fmt.Errorf("output at offset %d, want %d", ev.Offset, out.Len())
			}
			out.Write(ev.Data)
			if onData != nil {
				onData()
			}
		}
		if ev.ExitCode != nil {
			exited = *ev.ExitCode == 0
		}
		return nil
	})
	return exited, err
}

// atFault hands over from the running hostd with SIGTERM, starts one that
// dies at fault step, and runs the operation that reaches it. It returns
// the check to run once a clean hostd is up again.
func (r *restarter) atFault(ctx context.Context, cycle int, step string) (func(context.Context), error) {
	if err := r.h.term(); err != nil {
		r.fail("hostd on SIGTERM: %v", err)
	}
	if err := r.observeDead(); err != nil {
		return nil, err
	}
	if err := r.startAndCheck(ctx, step); err != nil {
		return nil, err
	}
	w, err := r.live()
	if err != nil {
		return nil, err
	}
	op, after, err := r.faultOp(ctx, cycle, step, w)
	if err != nil {
		return nil, err
	}
	octx, cancel := context.WithTimeout(ctx, 2*opTimeout)
	opErr := op(octx)
	cancel()
	if opErr == nil {
		r.fail("%s: the operation succeeded: the fault point was not reached", step)
	}
	if !r.h.died(opTimeout) {
		r.fail("%s: hostd did not die at the fault point (killed)", step)
	}
	return after, r.observeDead()
}

// faultOp returns the operation that reaches step on sandbox w and the
// check of its outcome after the restart.
func (r *restarter) faultOp(ctx context.Context, cycle int, step string, w *watched) (op func(context.Context) error, after func(context.Context), err error) {
	c := r.h.c
	switch step {
	case killExec:
		// The command started in the guest before hostd died: it runs on.
		path, word := fmt.Sprintf("/root/inflight-%d", cycle), fmt.Sprintf("cut-%d", cycle)
		op = func(ctx context.Context) error {
			_, err := c.Exec(ctx, w.id, client.ExecRequest{Cmd: []string{"sh", "-c", "echo " + word + " > " + path + ".tmp; mv " + path + ".tmp " + path}})
			return err
		}
		after = func(ctx context.Context) {
			if got, err := waitFile(ctx, c, w.id, path); err != nil || got != word+"\n" {
				r.mismatches = append(r.mismatches, fmt.Sprintf("%s: the exec cut by the crash: %s is %q, %v", w.id, path, got, err))
			}
		}
	case killCreate:
		op = func(ctx context.Context) error { _, err := c.Fork(ctx, w.id, 1); return err }
		after = r.dropOthers
	case killDelete:
		forks, err := c.Fork(ctx, w.id, 1)
		if err != nil {
			return nil, nil, fmt.Errorf("fork to delete: %w", err)
		}
		op = func(ctx context.Context) error { return c.DeleteSandbox(ctx, forks[0].ID) }
		after = r.dropOthers
	default:
		return nil, nil, fmt.Errorf("no operation for fault step %q", step)
	}
	return op, after, nil
}

// dropOthers checks that every listed sandbox that is not watched (one
// whose create or delete a crash cut) is failed, deletes it, and checks
// that nothing of it is left.
func (r *restarter) dropOthers(ctx context.Context) {
	c := r.h.c
	list, err := c.ListSandboxes(ctx)
	if err != nil {
		r.fail("list: %v", err)
		return
	}
	all, err := observe(r.h.dataDir())
	if err != nil {
		r.fail("observe: %v", err)
		return
	}
	dropped := map[string]bool{}
	for _, sb := range list {
		if r.watches(sb.ID) {
			continue
		}
		dropped[sb.ID] = true
		if sb.State != "failed" {
			r.mismatches = append(r.mismatches, fmt.Sprintf("%s, cut mid-operation by the crash, is %s, want failed", sb.ID, sb.State))
		}
		if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
			r.fail("delete %s: %v", sb.ID, err)
		}
	}
	before := all.only(dropped) // the warm pool's sandboxes are not listed
	left, _, err := r.leaksAfter(ctx, before)
	if err != nil {
		r.fail("leak check: %v", err)
	}
	r.leaks = append(r.leaks, left...)
}

func (r *restarter) watches(id string) bool {
	for _, w := range r.sbs {
		if w.id == id {
			return true
		}
	}
	return false
}

// waitFile reads path in sandbox id, waiting a while for it to appear.
func waitFile(ctx context.Context, c *client.Client, id, path string) (string, error) {
	var out string
	var err error
	for range 30 {
		if out, err = run1(ctx, c, id, "cat "+path); err == nil {
			return out, nil
		}
		if ctx.Err() != nil {
			break
		}
		time.Sleep(time.Second)
	}
	return out, err
}
