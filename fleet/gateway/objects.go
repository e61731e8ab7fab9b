package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/agentbox/agentbox/apitypes"
	"github.com/agentbox/agentbox/fleet/store"
)

// reachObject returns a snapshot's or template's record if the caller may
// reach it (another project's is answered as not found).
func (g *Gateway) reachObject(ctx context.Context, kind, id string) (store.Object, error) {
	dctx, cancel := g.dbctx(ctx)
	defer cancel()
	o, err := g.st.GetObject(dctx, kind, id)
	if kind == store.KindSnapshot && isNotFound(err) {
		o, err = g.adoptSnapshot(ctx, id)
	}
	code := CodeSnapshotNotFound
	if kind == store.KindTemplate {
		code = CodeNotFound
	}
	switch {
	case isNotFound(err), err == nil && !isAdmin(ctx) && o.Project != caller(ctx).Project:
		return store.Object{}, errorf(http.StatusNotFound, code, "%s not found: %s", kind, id)
	case err != nil:
		return store.Object{}, err
	}
	return o, nil
}

// liveHosts lists the trusted live hosts.
func (g *Gateway) liveHosts(ctx context.Context) ([]store.Host, error) {
	dctx, cancel := g.dbctx(ctx)
	defer cancel()
	hosts, err := g.st.Hosts(dctx)
	if err != nil {
		return nil, err
	}
	var out []store.Host
	for _, h := range g.trusted(hosts) {
		if h.State == store.HostLive {
			out = append(out, h)
		}
	}
	return out, nil
}

// snapshots routes /v1/snapshots[/{id}].
func (g *Gateway) snapshots(w http.ResponseWriter, r *http.Request, rest []string) string {
	if len(rest) == 0 && r.Method == http.MethodGet {
		g.listObjects(w, r, store.KindSnapshot)
		return "snapshots"
	}
	if len(rest) == 0 {
		g.writeError(w, errorf(http.StatusMethodNotAllowed, CodeInvalid, "method %s not allowed", r.Method))
		return "not_allowed"
	}
	o, err := g.reachObject(r.Context(), store.KindSnapshot, rest[0])
	if err != nil {
		g.writeError(w, err)
		return "snapshot"
	}
	g.objectOnHost(w, r, store.KindSnapshot, o)
	return "snapshot"
}

// objectOnHost forwards a call on a snapshot or template to its host; a
// delete there drops the record.
func (g *Gateway) objectOnHost(w http.ResponseWriter, r *http.Request, kind string, o store.Object) {
	dctx, cancel := g.dbctx(r.Context())
	h, err := g.st.GetHost(dctx, o.Host)
	cancel()
	if err != nil {
		g.writeError(w, err)
		return
	}
	if h.State != store.HostLive {
		g.writeError(w, &apiError{status: http.StatusServiceUnavailable, code: CodeHostUnavailable, retryAfter: true,
			msg: kind + " " + o.ID + " is on host " + h.Name + ", which is " + h.State})
		return
	}
	t := target{host: h.Name, addr: h.Addr}
	if r.Method == http.MethodDelete {
		t.after = func(resp *http.Response) error {
			if resp.StatusCode/100 == 2 || resp.StatusCode == http.StatusNotFound {
				dctx, cancel := g.dbctx(context.WithoutCancel(r.Context()))
				defer cancel()
				_ = g.st.DeleteObject(dctx, kind, o.ID)
			}
			return nil
		}
	}
	g.fwd.forward(w, r, t)
}

// listObjects merges the snapshot or template lists of every live host,
// keeping what the caller's project owns (templates without a record,
// such as a host's built-in ones, are everyone's).
func (g *Gateway) listObjects(w http.ResponseWriter, r *http.Request, kind string) {
	hosts, err := g.liveHosts(r.Context())
	if err != nil {
		g.writeError(w, err)
		return
	}
	dctx, cancel := g.dbctx(r.Context())
	recs, err := g.st.ListObjects(dctx, kind, "")
	cancel()
	if err != nil {
		g.writeError(w, err)
		return
	}
	owner := map[string]string{}
	for _, o := range recs {
		owner[o.ID] = o.Project
	}
	path := "/v1/snapshots"
	if kind == store.KindTemplate {
		path = "/v1/templates"
	}
	bodies := g.fanOut(r.Context(), hosts, path)
	mine := func(id string) bool {
		p, ok := owner[id]
		return isAdmin(r.Context()) || p == caller(r.Context()).Project || (!ok && kind == store.KindTemplate)
	}
	if kind == store.KindSnapshot {
		var out apitypes.SnapshotList
		for _, b := range bodies {
			var l apitypes.SnapshotList
			_ = json.Unmarshal(b, &l)
			for _, s := range l.Snapshots {
				if mine(s.ID) {
					out.Snapshots = append(out.Snapshots, s)
				}
			}
		}
		if out.Snapshots == nil {
			out.Snapshots = []apitypes.Snapshot{}
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	seen := map[string]bool{}
	out := apitypes.TemplateList{Templates: []apitypes.Template{}}
	for _, b := range bodies {
		var l apitypes.TemplateList
		_ = json.Unmarshal(b, &l)
		for _, t := range l.Templates {
			if mine(t.Name) && !seen[t.Name] {
				seen[t.Name] = true
				out.Templates = append(out.Templates, t)
			}
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// fanOut GETs path from every host at once and returns the 200 bodies.
func (g *Gateway) fanOut(ctx context.Context, hosts []store.Host, path string) [][]byte {
	var (
		mu  sync.Mutex
		out [][]byte
		wg  sync.WaitGroup
	)
	for _, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			resp, b, err := g.fwd.call(cctx, h.Name, h.Addr, http.MethodGet, path, nil, http.Header{}, maxAnswer)
			if err != nil || resp.StatusCode != http.StatusOK {
				g.log.Warn("fan-out: host did not answer", "host", h.Name, "path", path, "err", err)
				return
			}
			mu.Lock()
			out = append(out, b)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

// templates routes /v1/templates[/{name}].
func (g *Gateway) templates(w http.ResponseWriter, r *http.Request, rest []string) string {
	switch {
	case len(rest) == 0 && r.Method == http.MethodGet:
		g.listObjects(w, r, store.KindTemplate)
		return "templates"
	case len(rest) == 0 && r.Method == http.MethodPost:
		g.createTemplate(w, r)
		return "create_template"
	case len(rest) == 0:
		g.writeError(w, errorf(http.StatusMethodNotAllowed, CodeInvalid, "method %s not allowed", r.Method))
		return "not_allowed"
	case len(rest) == 1 && rest[0] == "build" && r.Method == http.MethodPost:
		g.buildTemplate(w, r)
		return "build_template"
	}
	o, err := g.reachObject(r.Context(), store.KindTemplate, rest[0])
	if isNotFound(err) || err != nil && errorCode(err) == CodeNotFound {
		// A host's own template (no record): any live host that has it.
		g.anyHost(w, r)
		return "template"
	}
	if err != nil {
		g.writeError(w, err)
		return "template"
	}
	g.objectOnHost(w, r, store.KindTemplate, o)
	return "template"
}

// createTemplate builds a template on the host of its snapshot, or, from
// an image or Dockerfile, on the host with the most free memory; the
// build's progress streams through.
func (g *Gateway) createTemplate(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, 8<<20))
	if err != nil {
		g.writeError(w, errorf(http.StatusBadRequest, CodeInvalid, "request body: %v", err))
		return
	}
	var req apitypes.CreateTemplateRequest
	if err := json.Unmarshal(body, &req); err != nil || req.Name == "" {
		g.writeError(w, errorf(http.StatusBadRequest, CodeInvalid, "request body: want a template with a name"))
		return
	}
	var host store.Host
	if req.SnapshotID != "" {
		o, err := g.reachObject(r.Context(), store.KindSnapshot, req.SnapshotID)
		if err != nil {
			g.writeError(w, err)
			return
		}
		dctx, cancel := g.dbctx(r.Context())
		host, err = g.st.GetHost(dctx, o.Host)
		cancel()
		if err != nil {
			g.writeError(w, err)
			return
		}
		if g.cfg.Portable && !host.Placeable(time.Now()) {
			// Its host is gone or drained: another imports the snapshot.
			if host, err = g.roomiest(r.Context()); err != nil {
				g.writeError(w, err)
				return
			}
		}
	} else if host, err = g.roomiest(r.Context()); err != nil {
		g.writeError(w, err)
		return
	}
	r.Body = io.NopCloser(bytesReader(body))
	r.ContentLength = int64(len(body))
	project := caller(r.Context()).Project
	g.fwd.forward(w, r, target{host: host.Name, addr: host.Addr, after: func(resp *http.Response) error {
		if resp.StatusCode/100 == 2 {
			dctx, cancel := g.dbctx(context.WithoutCancel(r.Context()))
			defer cancel()
			if err := g.st.PutObject(dctx, store.KindTemplate, store.Object{ID: req.Name, Project: project, Host: host.Name}); err != nil {
				g.log.Warn("template made but not recorded", "template", req.Name, "err", err)
			}
		}
		return nil
	}})
}

// roomiest is the live, active host with the most free memory.
func (g *Gateway) roomiest(ctx context.Context) (store.Host, error) {
	hosts, err := g.liveHosts(ctx)
	if err != nil {
		return store.Host{}, err
	}
	var best store.Host
	found := false
	for _, h := range hosts {
		if h.Placeable(time.Now()) && (!found || h.MemMiB-h.UsedMemMiB > best.MemMiB-best.UsedMemMiB) {
			best, found = h, true
		}
	}
	if !found {
		return store.Host{}, errorf(http.StatusServiceUnavailable, CodeNoCapacity, "no live, active host")
	}
	return best, nil
}

// anyHost forwards r to one live host (what every host answers alike).
func (g *Gateway) anyHost(w http.ResponseWriter, r *http.Request) {
	h, err := g.roomiest(r.Context())
	if err != nil {
		g.writeError(w, err)
		return
	}
	g.fwd.forward(w, r, target{host: h.Name, addr: h.Addr})
}

func errorCode(err error) string {
	if ae, ok := err.(*apiError); ok {
		return ae.code
	}
	return ""
}

// adoptSnapshot finds a snapshot the fleet has no record of on its live
// hosts (one taken on a host before it joined, or straight through its
// API) and records it: its sandbox's project owns it, else the default
// project (so that admins reach it). Not found anywhere is ErrNotFound.
func (g *Gateway) adoptSnapshot(ctx context.Context, id string) (store.Object, error) {
	hosts, err := g.liveHosts(ctx)
	if err != nil {
		return store.Object{}, err
	}
	for _, h := range hosts {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, b, err := g.fwd.call(cctx, h.Name, h.Addr, http.MethodGet, "/v1/snapshots/"+url.PathEscape(id), nil, http.Header{}, 1<<20)
		cancel()
		var snap apitypes.Snapshot
		if err != nil || resp.StatusCode != http.StatusOK || json.Unmarshal(b, &snap) != nil || snap.ID != id {
			continue
		}
		o := store.Object{ID: id, Project: store.DefaultProject, Host: h.Name, Sandbox: snap.SandboxID}
		dctx, dcancel := g.dbctx(ctx)
		if sb, err := g.st.Get(dctx, snap.SandboxID); err == nil {
			o.Project = sb.Project
		}
		err = g.st.PutObject(dctx, store.KindSnapshot, o)
		dcancel()
		if err != nil {
			return store.Object{}, err
		}
		g.log.Info("recorded a snapshot the fleet did not know", "snapshot_id", id, "host", h.Name, "project", o.Project)
		return o, nil
	}
	return store.Object{}, fmt.Errorf("%w: snapshot %s on no live host", store.ErrNotFound, id)
}
