package portproxy

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/agentbox/agentbox/hostd/sandbox"
)

const (
	// resumeTimeout bounds one resume started by a request; the resume
	// runs on if the client goes away.
	resumeTimeout = 2 * time.Minute
	// settleEvery is how often a request waits on a sandbox that is being
	// paused or resumed by someone else.
	settleEvery = 100 * time.Millisecond
)

// resumer runs at most one resume per sandbox; requests that arrive
// meanwhile wait for it.
type resumer struct {
	mu      sync.Mutex
	pending map[string]chan struct{}
}

// ensureRunning returns once sandbox info.ID is running: a paused sandbox
// is resumed (DESIGN R12: auto-resume on the next request), one that is
// pausing or resuming is waited for. Any other state is ErrNotRunning.
func (p *Proxy) ensureRunning(ctx context.Context, info sandbox.Info) error {
	for {
		switch info.State {
		case sandbox.StateRunning:
			return nil
		case sandbox.StatePaused:
			// A resume that lost a race with another one fails, but the
			// sandbox runs: the state, read again, decides.
			rerr := p.resume(ctx, info.ID)
			next, err := p.sbx.Get(ctx, info.ID)
			if err != nil {
				return err
			}
			if rerr != nil && next.State == sandbox.StatePaused {
				return rerr
			}
			info = next
			continue
		case sandbox.StatePausing, sandbox.StateResuming, sandbox.StateCreating:
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(settleEvery):
			}
		default:
			return fmt.Errorf("%w: sandbox %s is %s", sandbox.ErrNotRunning, info.ID, info.State)
		}
		var err error
		if info, err = p.sbx.Get(ctx, info.ID); err != nil {
			return err
		}
	}
}

// resume resumes sandbox id, or waits for the resume already under way.
func (p *Proxy) resume(ctx context.Context, id string) error {
	p.res.mu.Lock()
	if ch, ok := p.res.pending[id]; ok {
		p.res.mu.Unlock()
		select {
		case <-ch:
			return nil // the next Get tells how it went
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	ch := make(chan struct{})
	p.res.pending[id] = ch
	p.res.mu.Unlock()
	defer func() {
		p.res.mu.Lock()
		delete(p.res.pending, id)
		p.res.mu.Unlock()
		close(ch)
	}()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), resumeTimeout)
	defer cancel()
	start := time.Now()
	if _, err := p.sbx.Resume(rctx, id); err != nil {
		return fmt.Errorf("portproxy: resume: %w", err)
	}
	p.log.LogAttrs(ctx, slog.LevelInfo, "sandbox resumed by a service URL request",
		slog.String("sandbox_id", id), slog.Duration("duration", time.Since(start)))
	return nil
}
