package gateway

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"github.com/agentbox/agentbox/apitypes"
	"github.com/agentbox/agentbox/fleet/store"
)

// drainParallel is how many sandboxes a drain moves at once (each move
// is a durable pause, an import and a resume: disk and network bound).
const drainParallel = 3

// drainPasses bounds the passes a drain makes over a host's sandboxes (a
// create placed just before the host was drained can land after a pass).
const drainPasses = 3

// writeDrain moves every sandbox off h (it is draining: nothing new is
// placed there), running ones with their processes, paused ones by their
// durable snapshot, and answers what moved. 200 when the host is empty;
// 409 with the sandboxes that did not move otherwise.
func (g *Gateway) writeDrain(w http.ResponseWriter, r *http.Request, h store.Host) {
	d := apitypes.HostDrain{Failed: map[string]string{}}
	for range drainPasses {
		dctx, cancel := g.dbctx(r.Context())
		left, err := g.st.OnHost(dctx, h.Name)
		cancel()
		if err != nil {
			g.writeError(w, err)
			return
		}
		if len(left) == 0 {
			break
		}
		moved, failed := g.drainPass(r.Context(), left)
		d.Moved += moved
		d.Failed = failed
		if r.Context().Err() != nil {
			break
		}
	}
	dctx, cancel := g.dbctx(r.Context())
	defer cancel()
	if cur, err := g.st.GetHost(dctx, h.Name); err == nil {
		h = cur
	}
	d.Host = g.hostInfo(h)
	status := http.StatusOK
	if len(d.Failed) > 0 {
		status = http.StatusConflict
	}
	g.log.Info("host drained", "host", h.Name, "moved", d.Moved, "failed", len(d.Failed))
	writeJSON(w, status, d)
}

// drainPass moves sbs off their host, a few at a time.
func (g *Gateway) drainPass(ctx context.Context, sbs []store.Sandbox) (int, map[string]string) {
	var (
		mu     sync.Mutex
		moved  int
		failed = map[string]string{}
		wg     sync.WaitGroup
		sem    = make(chan struct{}, drainParallel)
	)
	for _, sb := range sbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			_, err := g.move(ctx, sb, "")
			mu.Lock()
			defer mu.Unlock()
			var hr *hostRefused
			switch {
			case err == nil:
				moved++
			case errors.As(err, &hr):
				failed[sb.ID] = hr.Error()
			default:
				failed[sb.ID] = err.Error()
			}
		}()
	}
	wg.Wait()
	return moved, failed
}
