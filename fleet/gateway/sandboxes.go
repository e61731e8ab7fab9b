package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/apitypes"
	"github.com/agentbox/agentbox/fleet/hosttoken"
	"github.com/agentbox/agentbox/fleet/placement"
	"github.com/agentbox/agentbox/fleet/store"
)

// maxAnswer bounds a host's answer that the gateway reads whole.
const maxAnswer = 64 << 20

// create places a new sandbox and asks its host to make it.
func (g *Gateway) create(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, 1<<20))
	if err != nil {
		g.writeError(w, errorf(http.StatusBadRequest, CodeInvalid, "request body: %v", err))
		return
	}
	var req apitypes.CreateSandboxRequest
	if err := json.Unmarshal(body, &req); err != nil {
		g.writeError(w, errorf(http.StatusBadRequest, CodeInvalid, "request body: %v", err))
		return
	}
	need := store.Need{Project: caller(r.Context()).Project, Count: 1, MemoryMiB: int64(req.MemoryMiB), VCPUs: int64(req.VCPUs),
		Template: req.Template}
	if need.MemoryMiB <= 0 {
		need.MemoryMiB = int64(g.cfg.DefaultMemoryMiB)
	}
	if need.VCPUs <= 0 {
		need.VCPUs = int64(g.cfg.DefaultVCPUs)
	}
	only, err := g.pinned(r.Context(), req)
	if err != nil {
		g.writeError(w, err)
		return
	}
	res, err := g.placeNear(r.Context(), need, only)
	if err != nil {
		g.writeError(w, err)
		return
	}
	if err := g.syncSecrets(r.Context(), res.Host); err != nil {
		g.unreserve(r.Context(), res.Placeholders)
		g.writeError(w, err)
		return
	}
	resp, out, err := g.fwd.call(r.Context(), res.Host.Name, res.Host.Addr, http.MethodPost, "/v1/sandboxes", body, r.Header, maxAnswer)
	if err != nil || resp.StatusCode/100 != 2 {
		g.unreserve(r.Context(), res.Placeholders)
		if err != nil {
			g.writeError(w, err)
			return
		}
		relay(w, resp, out)
		return
	}
	var sb apitypes.Sandbox
	if err := json.Unmarshal(out, &sb); err != nil || sb.ID == "" {
		g.unreserve(r.Context(), res.Placeholders)
		g.writeError(w, errorf(http.StatusBadGateway, CodeHostUnavailable, "host %s: create answered %q", res.Host.Name, truncate(out)))
		return
	}
	if err := g.commit(r.Context(), res.Placeholders[0], sb.ID); err != nil {
		// The host made it but the fleet could not record it: remove it
		// there, so nothing runs that no one owns.
		g.removeOnHost(r.Context(), res.Host, sb.ID)
		g.writeError(w, err)
		return
	}
	g.log.Info("sandbox placed", "sandbox_id", sb.ID, "host", res.Host.Name, "project", need.Project)
	relay(w, resp, out)
}

// pinned returns the hosts a create must go to (or, with portable
// snapshots, should go to first): a snapshot's own host; nil is any host.
//
// A template that the fleet built is on the host that built it (with
// portable snapshots any other host fetches it once); a host's own
// templates are anywhere.
func (g *Gateway) pinned(ctx context.Context, req apitypes.CreateSandboxRequest) ([]string, error) {
	kind, id := store.KindSnapshot, req.Snapshot
	if id == "" {
		kind, id = store.KindTemplate, req.Template
	}
	if id == "" || kind == store.KindTemplate && g.cfg.Portable {
		// Portable templates go where placement puts them (hosts that hold
		// one come first); a host that lacks it fetches it once.
		return nil, nil
	}
	o, err := g.reachObject(ctx, kind, id)
	if kind == store.KindTemplate && errorCode(err) == CodeNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return []string{o.Host}, nil
}

// placeNear places need on only (a snapshot's or template's own host),
// or, with portable snapshots, on any host when that one is gone or full
// (the host imports the snapshot or template from the store).
func (g *Gateway) placeNear(ctx context.Context, need store.Need, only []string) (store.Reservation, error) {
	res, err := g.place(ctx, need, only)
	if err != nil && only != nil && g.cfg.Portable && errors.Is(err, store.ErrNoCapacity) {
		return g.place(ctx, need, nil)
	}
	return res, err
}

// place chooses hosts for need (only, when set, limits them) and reserves
// room on the first that has it.
func (g *Gateway) place(ctx context.Context, need store.Need, only []string) (store.Reservation, error) {
	start := time.Now()
	dctx, cancel := g.dbctx(ctx)
	defer cancel()
	hosts, err := g.st.Hosts(dctx)
	if err != nil {
		return store.Reservation{}, err
	}
	hosts = g.trusted(hosts)
	if only != nil {
		hosts = keep(hosts, only)
	}
	cands := placement.Choose(hosts, need, g.cfg.K, rand.New(rand.NewPCG(uint64(start.UnixNano()), 7)), time.Now())
	if len(cands) == 0 {
		g.met.placed("none", time.Since(start))
		return store.Reservation{}, fmt.Errorf("%w: no live, active host (of %d) can take %d sandbox(es) of %d MiB and %d vCPUs%s%s",
			store.ErrNoCapacity, len(hosts), max(need.Count, 1), need.MemoryMiB, need.VCPUs, templateNote(need), whyNot(hosts))
	}
	res, err := g.st.Reserve(dctx, need, cands)
	if err != nil {
		g.met.placed("refused", time.Since(start))
		return res, err
	}
	g.met.placed(res.Host.Name, time.Since(start))
	return res, nil
}

func templateNote(n store.Need) string {
	if n.Template == "" {
		return ""
	}
	return " holding template " + n.Template
}

// trusted drops hosts whose registered token is not the fleet's.
func (g *Gateway) trusted(hosts []store.Host) []store.Host {
	out := hosts[:0:0]
	for _, h := range hosts {
		if h.TokenHash == hosttoken.Hash(g.fwd.token(h.Name)) {
			out = append(out, h)
		}
	}
	return out
}

func keep(hosts []store.Host, names []string) []store.Host {
	var out []store.Host
	for _, h := range hosts {
		for _, n := range names {
			if h.Name == n {
				out = append(out, h)
			}
		}
	}
	return out
}

func (g *Gateway) commit(ctx context.Context, placeholder, id string) error {
	dctx, cancel := g.dbctx(context.WithoutCancel(ctx))
	defer cancel()
	return g.st.Commit(dctx, placeholder, id)
}

func (g *Gateway) unreserve(ctx context.Context, ph []string) {
	dctx, cancel := g.dbctx(context.WithoutCancel(ctx))
	defer cancel()
	if err := g.st.Unreserve(dctx, ph); err != nil {
		g.log.Warn("placement: could not free a reservation (the host's agent recounts it)", "err", err)
	}
}

func (g *Gateway) removeOnHost(ctx context.Context, h store.Host, id string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, _, err := g.fwd.call(cctx, h.Name, h.Addr, http.MethodDelete, "/v1/sandboxes/"+id, nil, http.Header{}, 1<<16); err != nil {
		g.log.Error("sandbox made but not recorded, and not removed", "sandbox_id", id, "host", h.Name, "err", err)
	}
}

// fork places count forks on the parent's host (they share its memory)
// and records them.
func (g *Gateway) fork(w http.ResponseWriter, r *http.Request, id string) {
	parent, err := g.reachSandbox(r.Context(), id)
	if err != nil {
		g.writeError(w, err)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, 1<<20))
	if err != nil {
		g.writeError(w, errorf(http.StatusBadRequest, CodeInvalid, "request body: %v", err))
		return
	}
	var req apitypes.ForkRequest
	if err := json.Unmarshal(body, &req); err != nil || req.Count < 1 {
		g.writeError(w, errorf(http.StatusBadRequest, CodeInvalid, "fork: want {\"count\": n} with n >= 1"))
		return
	}
	need := store.Need{Project: parent.Project, Count: req.Count, MemoryMiB: parent.MemoryMiB, VCPUs: parent.VCPUs,
		Template: parent.Template, Parent: parent.ID}
	res, err := g.place(r.Context(), need, []string{parent.Host})
	if err != nil && g.cfg.Portable && errors.Is(err, store.ErrNoCapacity) {
		// The parent's host is full: the forks start on another host from
		// a snapshot of the parent (imported there from the store).
		g.forkElsewhere(w, r, parent, need)
		return
	}
	if err != nil {
		g.writeError(w, err)
		return
	}
	resp, out, err := g.fwd.call(r.Context(), parent.Host, parent.HostAddr, http.MethodPost, "/v1/sandboxes/"+id+"/fork", body, r.Header, maxAnswer)
	if err != nil || resp.StatusCode/100 != 2 {
		g.unreserve(r.Context(), res.Placeholders)
		if err != nil {
			g.writeError(w, err)
			return
		}
		relay(w, resp, out)
		return
	}
	var list apitypes.SandboxList
	_ = json.Unmarshal(out, &list)
	used := 0
	for i, sb := range list.Sandboxes {
		if i < len(res.Placeholders) && g.commit(r.Context(), res.Placeholders[i], sb.ID) == nil {
			used++
			continue
		}
		g.removeOnHost(r.Context(), res.Host, sb.ID)
	}
	g.unreserve(r.Context(), res.Placeholders[used:])
	relay(w, resp, out)
}

// proxySandbox forwards a call on one sandbox to its host, and records
// what a delete, pause or resume changed.
func (g *Gateway) proxySandbox(w http.ResponseWriter, r *http.Request, sb store.Sandbox, rest []string) {
	t := target{host: sb.Host, addr: sb.HostAddr, sandbox: sb}
	op := ""
	if len(rest) > 0 {
		op = rest[0]
	}
	switch {
	case len(rest) == 0 && r.Method == http.MethodDelete:
		t.after = func(resp *http.Response) error {
			if resp.StatusCode/100 == 2 || resp.StatusCode == http.StatusNotFound {
				g.recordDelete(r.Context(), sb.ID)
			}
			return nil
		}
	case len(rest) == 1 && (op == "pause" || op == "resume") && r.Method == http.MethodPost:
		state := map[string]string{"pause": store.StatePaused, "resume": store.StateRunning}[op]
		t.after = func(resp *http.Response) error {
			if resp.StatusCode/100 != 2 {
				return nil
			}
			dctx, cancel := g.dbctx(context.WithoutCancel(r.Context()))
			defer cancel()
			_ = g.st.SetState(dctx, sb.ID, state)
			if op == "pause" && g.cfg.Portable {
				return g.recordDurable(dctx, resp, sb.ID)
			}
			return nil
		}
	case len(rest) == 1 && op == "snapshots" && r.Method == http.MethodPost:
		t.after = func(resp *http.Response) error { return g.recordSnapshot(r.Context(), resp, sb) }
	}
	g.fwd.forward(w, r, t)
}

// recordDurable records the durable manifest a pause's answer names (the
// host's agent reports it too; the newer report wins).
func (g *Gateway) recordDurable(ctx context.Context, resp *http.Response, id string) error {
	b, err := readBody(resp, maxAnswer)
	if err != nil {
		return err
	}
	var p pausedInfo
	if json.Unmarshal(b, &p) == nil && p.Durable && p.DurableManifest != "" {
		if p.DurableAt.IsZero() {
			p.DurableAt = time.Now()
		}
		if err := g.st.SetDurable(ctx, id, p.DurableManifest, p.DurableAt); err != nil {
			g.log.Warn("durable pause not recorded (the host's agent records it)", "sandbox_id", id, "err", err)
		}
	}
	return nil
}

func (g *Gateway) recordDelete(ctx context.Context, id string) {
	dctx, cancel := g.dbctx(context.WithoutCancel(ctx))
	defer cancel()
	if err := g.st.Delete(dctx, id); err != nil {
		g.log.Warn("sandbox deleted on its host; its record stays until the host's agent drops it", "sandbox_id", id, "err", err)
	}
}

func (g *Gateway) recordSnapshot(ctx context.Context, resp *http.Response, sb store.Sandbox) error {
	if resp.StatusCode/100 != 2 {
		return nil
	}
	b, err := readBody(resp, maxAnswer)
	if err != nil {
		return err
	}
	var snap apitypes.Snapshot
	if json.Unmarshal(b, &snap) == nil && snap.ID != "" {
		dctx, cancel := g.dbctx(context.WithoutCancel(ctx))
		defer cancel()
		if err := g.st.PutObject(dctx, store.KindSnapshot, store.Object{ID: snap.ID, Project: sb.Project, Host: sb.Host, Sandbox: sb.ID}); err != nil {
			g.log.Warn("snapshot made but not recorded", "snapshot_id", snap.ID, "err", err)
		}
	}
	return nil
}

// listSandboxes lists the caller's sandboxes from their hosts (as they
// see them), and the lost ones from the fleet's records.
func (g *Gateway) listSandboxes(w http.ResponseWriter, r *http.Request) {
	project := caller(r.Context()).Project
	if isAdmin(r.Context()) && r.URL.Query().Get("project") == "*" {
		project = ""
	}
	dctx, cancel := g.dbctx(r.Context())
	rows, err := g.st.List(dctx, project)
	cancel()
	if err != nil {
		g.writeError(w, err)
		return
	}
	byHost := map[string][]store.Sandbox{}
	out := []apitypes.Sandbox{}
	for _, sb := range rows {
		if g.cfg.Portable && sb.Portable() && sb.HostState != store.HostLive {
			out = append(out, portableSandbox(sb))
			continue
		}
		if sb.State == store.StateLost || sb.HostState != store.HostLive {
			out = append(out, lostSandbox(sb))
			continue
		}
		byHost[sb.Host] = append(byHost[sb.Host], sb)
	}
	q := r.URL.Query()
	q.Del("project")
	out = append(out, g.fromHosts(r.Context(), byHost, q.Encode())...)
	writeJSON(w, http.StatusOK, apitypes.SandboxList{Sandboxes: out})
}

// fromHosts asks each host for its list and keeps the rows' sandboxes.
func (g *Gateway) fromHosts(ctx context.Context, byHost map[string][]store.Sandbox, query string) []apitypes.Sandbox {
	var (
		mu  sync.Mutex
		out []apitypes.Sandbox
		wg  sync.WaitGroup
	)
	for _, rows := range byHost {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := g.hostList(ctx, rows, query)
			mu.Lock()
			out = append(out, got...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

func (g *Gateway) hostList(ctx context.Context, rows []store.Sandbox, query string) []apitypes.Sandbox {
	want := map[string]store.Sandbox{}
	for _, sb := range rows {
		want[sb.ID] = sb
	}
	h := rows[0]
	path := "/v1/sandboxes"
	if query != "" {
		path += "?" + query
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, body, err := g.fwd.call(cctx, h.Host, h.HostAddr, http.MethodGet, path, nil, http.Header{}, maxAnswer)
	var list apitypes.SandboxList
	if err != nil || resp.StatusCode != http.StatusOK || json.Unmarshal(body, &list) != nil {
		// The host does not answer: say so per sandbox, not by omission.
		var out []apitypes.Sandbox
		for _, sb := range rows {
			sb.Reason = "its host " + sb.Host + " did not answer the list"
			out = append(out, unreachableSandbox(sb))
		}
		return out
	}
	var out []apitypes.Sandbox
	for _, sb := range list.Sandboxes {
		if _, ok := want[sb.ID]; ok {
			out = append(out, sb)
			delete(want, sb.ID)
		}
	}
	for _, sb := range rows {
		if _, ok := want[sb.ID]; ok && sb.Portable() {
			// Re-homed by its snapshot: the host imports it on resume.
			out = append(out, portableSandbox(sb))
		}
	}
	return out
}

func lostSandbox(sb store.Sandbox) apitypes.Sandbox {
	reason := sb.Reason
	if reason == "" {
		reason = "its host " + sb.Host + " is " + sb.HostState
	}
	return apitypes.Sandbox{ID: sb.ID, State: apitypes.SandboxStateLost, Error: reason, CreatedAt: sb.Created,
		MemoryMiB: int(sb.MemoryMiB), VCPUs: int(sb.VCPUs), Env: map[string]string{}, Metadata: map[string]string{}}
}

func unreachableSandbox(sb store.Sandbox) apitypes.Sandbox {
	s := lostSandbox(sb)
	s.State = apitypes.SandboxState(sb.State)
	return s
}

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }

func truncate(b []byte) string {
	if len(b) > 200 {
		b = b[:200]
	}
	return strconv.Quote(string(b))[1:]
}

// whyNot says what each host (the first few) has left, so a refusal names
// the limit it ran into.
func whyNot(hosts []store.Host) string {
	var b strings.Builder
	for i, h := range hosts {
		if i == 5 {
			fmt.Fprintf(&b, "; and %d more", len(hosts)-i)
			break
		}
		fmt.Fprintf(&b, "; %s (%s, %s): memory used %d of %d MiB, vCPUs used %d of %d", h.Name, h.State, h.Admin,
			h.UsedMemMiB, h.MemMiB, h.UsedVCPUs, h.VCPUs)
		if h.MaxSandboxes > 0 {
			fmt.Fprintf(&b, ", %d of max sandboxes %d", h.UsedSandboxes, h.MaxSandboxes)
		}
	}
	return b.String()
}
