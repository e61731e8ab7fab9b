package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"

	"github.com/agentbox/agentbox/apitypes"
	"github.com/agentbox/agentbox/fleet/store"
)

// buildTemplate runs POST /v1/templates/build (a Dockerfile or blueprint
// in an uploaded context) on the live host with the most free memory and
// streams its NDJSON progress through. The template is recorded for the
// caller's project when the stream's done event passes, since the stream
// answers 200 before the build's outcome is known.
func (g *Gateway) buildTemplate(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	if name == "" {
		g.writeError(w, errorf(http.StatusBadRequest, CodeInvalid, "query: want the template's name"))
		return
	}
	host, err := g.roomiest(r.Context())
	if err != nil {
		g.writeError(w, err)
		return
	}
	project := caller(r.Context()).Project
	record := func() {
		dctx, cancel := g.dbctx(context.WithoutCancel(r.Context()))
		defer cancel()
		if err := g.st.PutObject(dctx, store.KindTemplate, store.Object{ID: name, Project: project, Host: host.Name}); err != nil {
			g.log.Warn("template built but not recorded", "template", name, "err", err)
		}
	}
	g.fwd.forward(w, r, target{host: host.Name, addr: host.Addr, after: func(resp *http.Response) error {
		if resp.StatusCode == http.StatusOK {
			resp.Body = &doneWatcher{rc: resp.Body, onDone: record}
		}
		return nil
	}})
}

// maxEventLine bounds the line doneWatcher keeps: a longer one (a log
// line) is passed through but not parsed.
const maxEventLine = 64 << 10

// doneWatcher passes a build's NDJSON stream through unchanged and calls
// onDone once when a line is a done event with its template.
type doneWatcher struct {
	rc     io.ReadCloser
	onDone func()
	line   []byte
	long   bool
	fired  bool
}

func (d *doneWatcher) Read(p []byte) (int, error) {
	n, err := d.rc.Read(p)
	d.scan(p[:n])
	if err == io.EOF && !d.fired && !d.long && isDone(d.line) {
		// The last event without its newline.
		d.fired = true
		d.onDone()
	}
	return n, err
}

func (d *doneWatcher) Close() error { return d.rc.Close() }

func (d *doneWatcher) scan(b []byte) {
	for len(b) > 0 && !d.fired {
		i := bytes.IndexByte(b, '\n')
		chunk := b
		if i >= 0 {
			chunk = b[:i]
		}
		if !d.long && len(d.line)+len(chunk) <= maxEventLine {
			d.line = append(d.line, chunk...)
		} else {
			d.long, d.line = true, d.line[:0]
		}
		if i < 0 {
			return
		}
		if !d.long && isDone(d.line) {
			d.fired = true
			d.onDone()
		}
		d.line, d.long, b = d.line[:0], false, b[i+1:]
	}
}

func isDone(line []byte) bool {
	var ev apitypes.TemplateBuildEvent
	return json.Unmarshal(line, &ev) == nil && ev.Type == apitypes.TemplateBuildEventTypeDone && ev.Template != nil
}
