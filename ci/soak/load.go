package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"sync"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/figures"
)

// opTimeout bounds one API call of the soak, so a hang shows as an error.
const opTimeout = 2 * time.Minute

// tally is what the clients of one kind of operation measured.
type tally struct {
	mu     sync.Mutex
	lat    []time.Duration
	errors int
	first  error
}

func (t *tally) record(d time.Duration, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		t.errors++
		if t.first == nil {
			t.first = err
		}
		return
	}
	t.lat = append(t.lat, d)
}

func (t *tally) row(tb *figures.Table, name string) {
	note := fmt.Sprintf("%d errors", t.errors)
	if t.first != nil {
		note += "; first: " + t.first.Error()
	}
	tb.Require(name+": operations, p50 / p99", t.errors == 0, fmt.Sprintf("%d, %s", len(t.lat)+t.errors, figures.P50P99(t.lat)), "goal 0 errors; "+note)
}

// soakLoad runs o.clients clients per sandbox for o.duration, each
// alternating an exec and a 1 MiB file write + read checked by sha256.
func soakLoad(ctx context.Context, h *hostdProc, sbs []client.Sandbox, o options, rss0 float64, tb *figures.Table) error {
	progress("load: %d sandboxes × %d clients for %s", len(sbs), o.clients, o.duration)
	var execs, files tally
	deadline := time.Now().Add(o.duration)
	var wg sync.WaitGroup
	for _, sb := range sbs {
		for i := range o.clients {
			wg.Go(func() {
				path := fmt.Sprintf("/root/soak-%d.bin", i)
				for n := 0; time.Now().Before(deadline) && ctx.Err() == nil; n++ {
					start := time.Now()
					err := execOnce(ctx, h.c, sb.ID, fmt.Sprint(n))
					execs.record(time.Since(start), err)
					start = time.Now()
					err = fileRoundTrip(ctx, h.c, sb.ID, path)
					files.record(time.Since(start), err)
				}
			})
		}
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	rss1, err := h.rssMiB()
	if err != nil {
		return err
	}
	name := fmt.Sprintf("load %d sandboxes × %d clients, %s", len(sbs), o.clients, o.duration)
	execs.row(tb, name+", exec `echo`")
	files.row(tb, name+", 1 MiB write+read, sha256 checked")
	tb.Add("hostd RSS before → after the load", fmt.Sprintf("%.0f → %.0f MiB", rss0, rss1), "")
	return nil
}

// execOnce runs `echo word` and checks what came back.
func execOnce(ctx context.Context, c *client.Client, id, word string) error {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	r, err := c.Exec(ctx, id, client.ExecRequest{Cmd: []string{"echo", word}})
	if err != nil {
		return err
	}
	if r.ExitCode != 0 || r.Stdout != word+"\n" {
		return fmt.Errorf("exec echo %s: exit %d, stdout %q", word, r.ExitCode, r.Stdout)
	}
	return nil
}

// fileRoundTrip writes 1 MiB of random bytes to path and reads it back.
func fileRoundTrip(ctx context.Context, c *client.Client, id, path string) error {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	data := make([]byte, 1<<20)
	rand.Read(data)
	if err := c.WriteFile(ctx, id, path, 0o644, bytes.NewReader(data)); err != nil {
		return err
	}
	h := sha256.New()
	if err := c.ReadFile(ctx, id, path, h); err != nil {
		return err
	}
	if want := sha256.Sum256(data); !bytes.Equal(h.Sum(nil), want[:]) {
		return fmt.Errorf("%s: read back differs from what was written", path)
	}
	return nil
}
