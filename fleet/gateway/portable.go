package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"time"

	"github.com/agentbox/agentbox/apitypes"
	"github.com/agentbox/agentbox/fleet/placement"
	"github.com/agentbox/agentbox/fleet/store"
)

// Portable snapshots (issue 40): with Config.Portable the hosts share an
// object store, a pause is durable there, and a paused sandbox, a
// snapshot or a template can come back on any host (that host imports
// it on demand). This file moves sandboxes between hosts: re-homing a
// paused one whose host is gone or lacks it, and migrate.

// moveHold bounds how long a migrate marks a sandbox as moving (a
// replica that dies mid-move lets it go after this).
const moveHold = 10 * time.Minute

// answer is a host's response, its body read.
type answer struct {
	resp *http.Response
	body []byte
}

// sandboxPath is /v1/sandboxes/{id}[/op].
func sandboxPath(id, op string) string {
	p := "/v1/sandboxes/" + url.PathEscape(id)
	if op != "" {
		p += "/" + op
	}
	return p
}

// hostCall makes one call to sb's host about sb (bounded in time: an
// import or a durable pause of a large guest takes minutes).
func (g *Gateway) hostCall(ctx context.Context, host, addr, method, path string) (answer, error) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Minute)
	defer cancel()
	resp, body, err := g.fwd.call(cctx, host, addr, method, path, nil, http.Header{}, maxAnswer)
	if err != nil {
		return answer{}, err
	}
	return answer{resp: resp, body: body}, nil
}

// hostRefused is a host's non-2xx answer as an error that keeps it.
type hostRefused struct {
	host string
	a    answer
}

func (e *hostRefused) Error() string {
	return fmt.Sprintf("host %s answered %d: %s", e.host, e.a.resp.StatusCode, truncate(e.a.body))
}

// ok turns a non-2xx answer into a hostRefused error.
func (a answer) ok(host string) error {
	if a.resp.StatusCode/100 == 2 {
		return nil
	}
	return &hostRefused{host: host, a: a}
}

// writeHostError answers err, relaying a host's own refusal as it was.
func (g *Gateway) writeHostError(w http.ResponseWriter, err error) {
	var hr *hostRefused
	if errors.As(err, &hr) {
		relay(w, hr.a.resp, hr.a.body)
		return
	}
	g.writeError(w, err)
}

// holds reports whether sb's (live) host has sb.
func (g *Gateway) holds(ctx context.Context, sb store.Sandbox) (bool, error) {
	a, err := g.hostCall(ctx, sb.Host, sb.HostAddr, http.MethodGet, sandboxPath(sb.ID, ""))
	if err != nil {
		return false, err
	}
	switch a.resp.StatusCode {
	case http.StatusOK:
		return true, nil
	case http.StatusNotFound:
		return false, nil
	}
	return false, a.ok(sb.Host)
}

// holdsNow reports whether sb's host is live and has it.
func (g *Gateway) holdsNow(ctx context.Context, sb store.Sandbox) bool {
	if sb.HostState != store.HostLive {
		return false
	}
	has, err := g.holds(ctx, sb)
	return err == nil && has
}

// portableSandbox is a paused, durable sandbox that no live host holds
// now, as its record says it (its next call resumes it on a host).
func portableSandbox(sb store.Sandbox) apitypes.Sandbox {
	s := unreachableSandbox(sb)
	s.State = apitypes.SandboxStatePaused
	s.Error = sb.Reason
	return s
}

// rehome brings a portable sandbox (paused, durable) to a live host that
// holds it, before a call on it: a live host that has it keeps it; a live
// host that lacks it (a drain re-homed the row there, or the host came
// back without it) resumes it from the store; a host that is not live
// loses it to a placed host, which resumes it from the store. It returns
// the row as it is now and, when it resumed the sandbox, the resume's
// answer.
func (g *Gateway) rehome(ctx context.Context, sb store.Sandbox) (store.Sandbox, *answer, error) {
	if sb.HostState == store.HostLive {
		has, err := g.holds(ctx, sb)
		if err != nil || has {
			return sb, nil, err
		}
	} else {
		h, err := g.moveRow(ctx, sb, nil, store.StatePaused)
		if err != nil {
			return sb, nil, err
		}
		g.log.Info("sandbox re-homed from a host that is gone", "sandbox_id", sb.ID, "from", sb.Host, "to", h.Name)
		sb = g.rowOn(sb, h)
	}
	a, err := g.resumeOn(ctx, sb)
	if err != nil {
		return sb, nil, err
	}
	sb.State = store.StateRunning
	return sb, &a, nil
}

// rowOn is sb's row as Move left it on h.
func (g *Gateway) rowOn(sb store.Sandbox, h store.Host) store.Sandbox {
	sb.Host, sb.HostAddr, sb.HostState, sb.HostEpoch, sb.HostEpochOfHostNow = h.Name, h.Addr, h.State, h.Epoch, h.Epoch
	sb.Gen++
	return sb
}

// resumeOn resumes sb on its host (which imports it when it lacks it)
// and records it running.
func (g *Gateway) resumeOn(ctx context.Context, sb store.Sandbox) (answer, error) {
	a, err := g.hostCall(ctx, sb.Host, sb.HostAddr, http.MethodPost, sandboxPath(sb.ID, "resume"))
	if err == nil {
		err = a.ok(sb.Host)
	}
	if err != nil {
		return a, err
	}
	dctx, cancel := g.dbctx(context.WithoutCancel(ctx))
	defer cancel()
	if err := g.st.SetState(dctx, sb.ID, store.StateRunning); err != nil {
		g.log.Warn("resumed, not recorded (the host's agent records it)", "sandbox_id", sb.ID, "host", sb.Host, "err", err)
	}
	return a, nil
}

// moveRow moves sb's row, in state, to the first of only (nil: a placed
// host other than its own) that has room.
func (g *Gateway) moveRow(ctx context.Context, sb store.Sandbox, only []string, state string) (store.Host, error) {
	cands := only
	if cands == nil {
		hosts, err := g.liveHosts(ctx)
		if err != nil {
			return store.Host{}, err
		}
		need := store.Need{Project: sb.Project, Count: 1, MemoryMiB: sb.MemoryMiB, VCPUs: sb.VCPUs, Template: sb.Template}
		cands = placement.Choose(hosts, need, g.cfg.K, rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11)), time.Now())
	}
	dctx, cancel := g.dbctx(context.WithoutCancel(ctx))
	defer cancel()
	return g.st.Move(dctx, sb.ID, sb.Gen, cands, state)
}

// pausedInfo is what a durable pause's answer says of it (hostd's
// Sandbox: durable, durable_manifest, durable_at).
type pausedInfo struct {
	Durable         bool      `json:"durable"`
	DurableManifest string    `json:"durable_manifest"`
	DurableAt       time.Time `json:"durable_at"`
}

// pauseDurable pauses sb on its host and makes sure the pause is durable
// (recording it); a pause that is not (no store on the host) is undone.
func (g *Gateway) pauseDurable(ctx context.Context, sb store.Sandbox) error {
	a, err := g.hostCall(ctx, sb.Host, sb.HostAddr, http.MethodPost, sandboxPath(sb.ID, "pause"))
	if err == nil {
		err = a.ok(sb.Host)
	}
	if err != nil {
		return err
	}
	var p pausedInfo
	_ = json.Unmarshal(a.body, &p)
	if !p.Durable || p.DurableManifest == "" {
		if _, err := g.resumeOn(ctx, sb); err != nil {
			g.log.Error("a pause for a migrate was not durable, and the sandbox did not resume", "sandbox_id", sb.ID, "err", err)
		}
		return errorf(http.StatusConflict, CodeNotDurable, "sandbox %s: host %s's pause is not durable (is it started with --snapshot-store?); the sandbox runs on where it is",
			sb.ID, sb.Host)
	}
	if p.DurableAt.IsZero() {
		p.DurableAt = time.Now()
	}
	dctx, cancel := g.dbctx(context.WithoutCancel(ctx))
	defer cancel()
	if err := g.st.SetState(dctx, sb.ID, store.StatePaused); err != nil {
		return err
	}
	return g.st.SetDurable(dctx, sb.ID, p.DurableManifest, p.DurableAt)
}

// release tells sb's old host to forget it (its files and records; the
// snapshot in the store stays), retrying a few times.
func (g *Gateway) release(ctx context.Context, old store.Sandbox) {
	var err error
	for i := range 3 {
		var a answer
		if a, err = g.hostCall(ctx, old.Host, old.HostAddr, http.MethodPost, sandboxPath(old.ID, "release")); err == nil {
			if err = a.ok(old.Host); err == nil || a.resp.StatusCode == http.StatusNotFound {
				return
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(i+1) * time.Second):
		}
	}
	g.log.Warn("sandbox moved; its old host did not release its copy", "sandbox_id", old.ID, "host", old.Host, "err", err)
}

// move moves sb to another host (to, or a placed one when ""), keeping
// its state: a running sandbox is paused durably on its host, its row
// moved, resumed on the new host (which imports it), and released on the
// old one; a paused one is made durable if it is not, its row moved, and,
// when its old host is live, imported on the new host (resumed and paused
// again there) before the old host releases it; one whose host is gone is
// imported by the new host on its next resume. On a failure after the
// pause the sandbox comes back where it was: nothing is lost.
func (g *Gateway) move(ctx context.Context, sb store.Sandbox, to string) (store.Sandbox, error) {
	dctx, cancel := g.dbctx(ctx)
	ok, err := g.st.SetMoving(dctx, sb.ID, time.Now().Add(moveHold))
	cancel()
	if err != nil {
		return sb, err
	}
	if !ok {
		return sb, &apiError{status: http.StatusConflict, code: CodeSandboxMoving, retryAfter: true, msg: "sandbox " + sb.ID + " is being moved already"}
	}
	defer func() {
		dctx, cancel := g.dbctx(context.WithoutCancel(ctx))
		defer cancel()
		_, _ = g.st.SetMoving(dctx, sb.ID, time.Time{})
	}()
	var only []string
	if to != "" {
		if to == sb.Host {
			return sb, errorf(http.StatusConflict, CodeInvalid, "sandbox %s is on host %s already", sb.ID, to)
		}
		only = []string{to}
	}
	running := sb.State == store.StateRunning
	if sb.HostState == store.HostLive && (running || sb.Durable == "") {
		if !running {
			// Paused, not durably: bring it back to pause it durably.
			if _, err := g.resumeOn(ctx, sb); err != nil {
				return sb, err
			}
		}
		if err := g.pauseDurable(ctx, sb); err != nil {
			return sb, err
		}
	} else if !sb.Portable() {
		return sb, &apiError{status: http.StatusServiceUnavailable, code: CodeHostUnavailable, retryAfter: true,
			msg: "sandbox " + sb.ID + "'s host " + sb.Host + " is " + sb.HostState + " and it has no durable snapshot; retry"}
	}
	old, err := g.fresh(ctx, sb.ID)
	if err != nil {
		return sb, err
	}
	h, err := g.moveRow(ctx, old, only, store.StatePaused)
	if err != nil {
		return sb, g.putBack(ctx, old, running, err)
	}
	moved := g.rowOn(old, h)
	// A paused sandbox whose old host holds it is resumed on the new host
	// too (which imports it, every chunk verified) and paused there again
	// before the old host releases its copy: a stored copy that is bad is
	// met while the old one is still there to come back to.
	verify := !running && old.HostState == store.HostLive
	if running || verify {
		if _, err := g.resumeOn(ctx, moved); err != nil {
			g.log.Warn("migrate: the new host did not resume the sandbox; bringing it back", "sandbox_id", sb.ID, "to", h.Name, "err", err)
			if cur, ferr := g.fresh(ctx, sb.ID); ferr == nil {
				dctx, cancel := g.dbctx(context.WithoutCancel(ctx))
				_, merr := g.st.MoveBack(dctx, cur.ID, cur.Gen, old.Host, store.StatePaused)
				cancel()
				if merr != nil {
					g.log.Error("migrate: could not move the row back", "sandbox_id", sb.ID, "err", merr)
				}
			}
			return sb, g.putBack(ctx, old, running, err)
		}
		moved.State = store.StateRunning
		if verify {
			if err := g.pauseDurable(ctx, moved); err != nil {
				// It runs on, on the new host: nothing is lost, but the
				// old copy is no longer the sandbox.
				g.log.Warn("migrate: the paused sandbox was imported on the new host and did not pause again there; it runs there", "sandbox_id", sb.ID, "to", h.Name, "err", err)
			} else {
				moved.State = store.StatePaused
			}
		}
	}
	if old.HostState == store.HostLive {
		g.release(ctx, old)
	}
	g.log.Info("sandbox moved", "sandbox_id", sb.ID, "from", old.Host, "to", h.Name, "state", moved.State)
	return moved, nil
}

// putBack resumes a sandbox that a failed move paused on its (live)
// host, and returns why the move failed.
func (g *Gateway) putBack(ctx context.Context, old store.Sandbox, running bool, why error) error {
	if running && old.HostState == store.HostLive {
		if _, err := g.resumeOn(ctx, old); err != nil {
			g.log.Error("migrate failed and the sandbox did not resume where it was (it stays paused, durably)", "sandbox_id", old.ID, "err", err)
		}
	}
	return why
}

// fresh re-reads a sandbox's row.
func (g *Gateway) fresh(ctx context.Context, id string) (store.Sandbox, error) {
	dctx, cancel := g.dbctx(context.WithoutCancel(ctx))
	defer cancel()
	return g.st.Get(dctx, id)
}

// migrateReq is the body of POST /v1/sandboxes/{id}/migrate.
type migrateReq struct {
	Host string `json:"host"`
}

// migrate answers POST /v1/sandboxes/{id}/migrate: the sandbox moves to
// the named host or a placed one, keeping its state; the answer is its
// record on its new host.
func (g *Gateway) migrate(w http.ResponseWriter, r *http.Request, sb store.Sandbox) {
	if !g.cfg.Portable {
		g.writeError(w, errorf(http.StatusConflict, CodeNotDurable, "this fleet has no snapshot store: sandboxes cannot move between hosts"))
		return
	}
	var req migrateReq
	if r.ContentLength != 0 {
		if err := decode(r, &req); err != nil {
			g.writeError(w, err)
			return
		}
	}
	moved, err := g.move(r.Context(), sb, req.Host)
	if err != nil {
		g.writeHostError(w, err)
		return
	}
	a, err := g.hostCall(r.Context(), moved.Host, moved.HostAddr, http.MethodGet, sandboxPath(moved.ID, ""))
	if err != nil || a.resp.StatusCode != http.StatusOK {
		// Paused and not imported yet: the fleet's record says it.
		s := unreachableSandbox(moved)
		s.Error = ""
		writeJSON(w, http.StatusOK, s)
		return
	}
	relay(w, a.resp, a.body)
}

// forkElsewhere answers a fork whose parent's host is full: the parent is
// snapshotted there, and the forks are restored from that snapshot on a
// placed host, which imports it from the store. They share the
// snapshot's chunks, not its host's memory.
func (g *Gateway) forkElsewhere(w http.ResponseWriter, r *http.Request, parent store.Sandbox, need store.Need) {
	ctx := r.Context()
	res, err := g.place(ctx, need, nil)
	if err != nil {
		g.writeError(w, err)
		return
	}
	snap, err := g.snapshotOn(ctx, parent)
	if err != nil {
		g.unreserve(ctx, res.Placeholders)
		g.writeHostError(w, err)
		return
	}
	body, _ := json.Marshal(apitypes.CreateSandboxRequest{Snapshot: snap, MemoryMiB: int(parent.MemoryMiB), VCPUs: int(parent.VCPUs)})
	out := apitypes.SandboxList{Sandboxes: []apitypes.Sandbox{}}
	for i, ph := range res.Placeholders {
		resp, b, err := g.fwd.call(ctx, res.Host.Name, res.Host.Addr, http.MethodPost, "/v1/sandboxes", body, http.Header{}, maxAnswer)
		var sb apitypes.Sandbox
		if err == nil {
			err = answer{resp: resp, body: b}.ok(res.Host.Name)
		}
		if err == nil && (json.Unmarshal(b, &sb) != nil || sb.ID == "") {
			err = errorf(http.StatusBadGateway, CodeHostUnavailable, "host %s: create answered %q", res.Host.Name, truncate(b))
		}
		if err == nil {
			if err = g.commit(ctx, ph, sb.ID); err != nil {
				g.removeOnHost(ctx, res.Host, sb.ID)
			}
		}
		if err != nil {
			g.unreserve(ctx, res.Placeholders[i:])
			for _, made := range out.Sandboxes {
				g.removeOnHost(ctx, res.Host, made.ID)
				g.recordDelete(ctx, made.ID)
			}
			g.writeHostError(w, err)
			return
		}
		out.Sandboxes = append(out.Sandboxes, sb)
	}
	g.log.Info("forks placed past their parent's host", "sandbox_id", parent.ID, "parent_host", parent.Host, "host", res.Host.Name,
		"snapshot_id", snap, "count", len(out.Sandboxes))
	writeJSON(w, http.StatusCreated, out)
}

// snapshotOn snapshots sb on its host, records the snapshot and returns
// its id.
func (g *Gateway) snapshotOn(ctx context.Context, sb store.Sandbox) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	resp, b, err := g.fwd.call(cctx, sb.Host, sb.HostAddr, http.MethodPost, sandboxPath(sb.ID, "snapshots"), []byte(`{}`), http.Header{}, maxAnswer)
	if err != nil {
		return "", err
	}
	if err := (answer{resp: resp, body: b}).ok(sb.Host); err != nil {
		return "", err
	}
	var snap apitypes.Snapshot
	if json.Unmarshal(b, &snap) != nil || snap.ID == "" {
		return "", errorf(http.StatusBadGateway, CodeHostUnavailable, "host %s: snapshot answered %q", sb.Host, truncate(b))
	}
	dctx, dcancel := g.dbctx(context.WithoutCancel(ctx))
	defer dcancel()
	if err := g.st.PutObject(dctx, store.KindSnapshot, store.Object{ID: snap.ID, Project: sb.Project, Host: sb.Host, Sandbox: sb.ID}); err != nil {
		g.log.Warn("snapshot made but not recorded", "snapshot_id", snap.ID, "err", err)
	}
	return snap.ID, nil
}
