package cloudhypervisor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/agent/channel"
	"github.com/agentbox/agentbox/vmm/cloudhypervisor/chapi"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// This file is a stand-in for Cloud Hypervisor's REST API, built from the
// pinned spec and nothing else. It validates every request against the
// spec, answers only with statuses and bodies the spec documents for the
// endpoint (and validates its own answers too), and records anything
// off-spec as a violation that fails the test. It proves our side of the
// contract, not Cloud Hypervisor's behaviour.

// specPath is the pinned spec, relative to this package.
const specPath = "spec/cloud-hypervisor.yaml"

type spec struct {
	doc    *openapi3.T
	router routers.Router
}

var (
	specOnce   sync.Once
	loadedSpec *spec
	specErr    error
)

func loadSpec(path string) (*spec, error) {
	specOnce.Do(func() {
		doc, err := openapi3.NewLoader().LoadFromFile(path)
		if err != nil {
			specErr = err
			return
		}
		r, err := legacy.NewRouter(doc) // also validates the document
		if err != nil {
			specErr = err
			return
		}
		loadedSpec = &spec{doc: doc, router: r}
	})
	return loadedSpec, specErr
}

// fakeRecord is one request the fake answered.
type fakeRecord struct {
	PID       int             `json:"pid"`
	Method    string          `json:"method"`
	Endpoint  string          `json:"endpoint"`
	Body      json.RawMessage `json:"body,omitempty"`
	NumFDs    int             `json:"num_fds"`
	FDData    []string        `json:"fd_data,omitempty"` // the first bytes of each received file
	Status    int             `json:"status"`
	Violation string          `json:"violation,omitempty"`
}

type fakeOptions struct {
	fail     map[string]int   // endpoint → status to answer instead (must be documented)
	hold     map[string]*held // endpoint → a request that waits before its answer
	stubborn bool             // answer vmm.shutdown but do not exit
	guestUp  time.Duration    // how long after create/restore the guest starts answering vsock
	agent    bool             // a vmmtest.Guest serves the vsock ports, not an echo
	onExit   func()           // called after vmm.shutdown's answer is written
	emit     func(fakeRecord) // receives every record
}

// fakeCH is the fake VMM. state "" means no VM is created.
type fakeCH struct {
	spec *spec
	opts fakeOptions

	mu     sync.Mutex
	state  chapi.VmState
	config map[string]json.RawMessage
	vsock  net.Listener
	guest  *vmmtest.Guest // with opts.agent, once a VM exists
	conns  map[net.Conn]bool
	closed bool
}

func newFakeCH(s *spec, opts fakeOptions) *fakeCH {
	return &fakeCH{spec: s, opts: opts, conns: map[net.Conn]bool{}}
}

// serve answers API connections on l until l is closed.
func (f *fakeCH) serve(l *net.UnixListener) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return
		}
		if !f.track(c) {
			return
		}
		go f.serveConn(c)
	}
}

func (f *fakeCH) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		c.Close()
		return false
	}
	f.conns[c] = true
	return true
}

// close ends every connection and the vsock listener.
func (f *fakeCH) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for c := range f.conns {
		c.Close()
	}
	if f.vsock != nil {
		f.vsock.Close()
	}
}

// fdReader reads a unix connection and keeps the descriptors that arrive
// as SCM_RIGHTS, the way Cloud Hypervisor's HTTP server does.
type fdReader struct {
	c   *net.UnixConn
	fds []int
}

func (r *fdReader) Read(p []byte) (int, error) {
	oob := make([]byte, unix.CmsgSpace(16*4))
	n, oobn, _, _, err := r.c.ReadMsgUnix(p, oob)
	n = max(n, 0) // -1 with some errors
	if oobn > 0 {
		msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
		for i := range msgs {
			if fds, err := unix.ParseUnixRights(&msgs[i]); perr == nil && err == nil {
				r.fds = append(r.fds, fds...)
			}
		}
	}
	return n, err
}

func (f *fakeCH) serveConn(c *net.UnixConn) {
	defer c.Close()
	fr := &fdReader{c: c}
	br := bufio.NewReader(fr)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return
		}
		fds := fr.fds
		fr.fds = nil
		resp, exit := f.respond(req, body, fds)
		if err := resp.Write(c); err != nil {
			return
		}
		if exit && f.opts.onExit != nil {
			f.closeGuest()
			f.opts.onExit()
		}
	}
}

// held holds an endpoint's requests: each one says it arrived, then waits
// for release (closed by the test) before it is answered.
type held struct {
	arrived chan struct{}
	release chan struct{}
}

func newHeld(t *testing.T) *held {
	h := &held{arrived: make(chan struct{}, 1), release: make(chan struct{})}
	t.Cleanup(func() { close(h.release) })
	return h
}

// respond validates req, answers it and validates the answer.
func (f *fakeCH) respond(req *http.Request, body []byte, fds []int) (*http.Response, bool) {
	defer closeFDs(fds)
	endpoint := strings.TrimPrefix(req.URL.Path, "/api/v1/")
	rec := fakeRecord{PID: os.Getpid(), Method: req.Method, Endpoint: endpoint, NumFDs: len(fds)}
	if json.Valid(body) {
		rec.Body = body
	}
	for _, fd := range fds {
		rec.FDData = append(rec.FDData, readFD(fd))
	}
	var violations []string
	req.URL.Scheme, req.URL.Host = "http", req.Host
	route, params, err := f.spec.router.FindRoute(req)
	var input *openapi3filter.RequestValidationInput
	if err == nil {
		req.Body = io.NopCloser(bytes.NewReader(body))
		input = &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{MultiError: true}}
		err = openapi3filter.ValidateRequest(context.Background(), input)
	}
	var a answer
	if err != nil {
		violations = append(violations, "request off-spec: "+err.Error())
		a = answer{status: http.StatusBadRequest, body: []string{"off-spec request", err.Error()}}
	} else {
		if h := f.opts.hold[endpoint]; h != nil {
			h.arrived <- struct{}{}
			<-h.release
		}
		a = f.handle(endpoint, body, fds)
		if a.violation != "" {
			violations = append(violations, a.violation)
		}
	}
	resp := a.response(req)
	if input != nil {
		rin := &openapi3filter.ResponseValidationInput{RequestValidationInput: input, Status: resp.StatusCode,
			Header: resp.Header, Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}}
		rin.SetBodyBytes(a.raw())
		if err := openapi3filter.ValidateResponse(context.Background(), rin); err != nil {
			violations = append(violations, "answer off-spec: "+err.Error())
		}
	}
	rec.Status, rec.Violation = resp.StatusCode, strings.Join(violations, "; ")
	if f.opts.emit != nil {
		f.opts.emit(rec)
	}
	return resp, endpoint == "vmm.shutdown" && resp.StatusCode == http.StatusNoContent && !f.opts.stubborn
}

// answer is the fake's reply to one request.
type answer struct {
	status    int
	body      any    // JSON-encoded when not nil
	violation string // what the driver did that the spec has no answer for
}

func (a answer) raw() []byte {
	if a.body == nil {
		return nil
	}
	b, _ := json.Marshal(a.body)
	return b
}

func (a answer) response(req *http.Request) *http.Response {
	raw := a.raw()
	h := http.Header{}
	if raw != nil {
		h.Set("Content-Type", "application/json")
	}
	return &http.Response{
		StatusCode: a.status, ProtoMajor: 1, ProtoMinor: 1, Request: req, Header: h,
		ContentLength: int64(len(raw)), Body: io.NopCloser(bytes.NewReader(raw)),
	}
}

func ok() answer             { return answer{status: http.StatusNoContent} }
func status(code int) answer { return answer{status: code, body: []string{http.StatusText(code)}} }
func offSpec(why string) answer {
	return answer{status: http.StatusInternalServerError, body: []string{why}, violation: why}
}

// handle runs one validated request against the fake VM.
func (f *fakeCH) handle(endpoint string, body []byte, fds []int) answer {
	f.mu.Lock()
	defer f.mu.Unlock()
	if code := f.opts.fail[endpoint]; code != 0 {
		return status(code)
	}
	switch endpoint {
	case "vmm.ping":
		return answer{status: http.StatusOK, body: chapi.VmmPingResponse{Version: "fake-0.3.0", Pid: ptr(int64(os.Getpid()))}}
	case "vmm.shutdown":
		return ok()
	case "vm.create":
		return f.create(body)
	case "vm.boot":
		return f.transition(chapi.VmStateCreated, chapi.VmStateRunning, http.StatusNotFound, 0)
	case "vm.pause":
		a := f.transition(chapi.VmStateRunning, chapi.VmStatePaused, http.StatusNotFound, http.StatusMethodNotAllowed)
		if f.guest != nil && f.state == chapi.VmStatePaused {
			f.guest.Pause()
		}
		return a
	case "vm.resume":
		a := f.transition(chapi.VmStatePaused, chapi.VmStateRunning, http.StatusNotFound, http.StatusMethodNotAllowed)
		if f.guest != nil && f.state == chapi.VmStateRunning {
			f.guest.Resume()
		}
		return a
	case "vm.shutdown":
		if f.state == chapi.VmStatePaused {
			return f.transition(chapi.VmStatePaused, chapi.VmStateShutdown, http.StatusNotFound, http.StatusMethodNotAllowed)
		}
		return f.transition(chapi.VmStateRunning, chapi.VmStateShutdown, http.StatusNotFound, http.StatusMethodNotAllowed)
	case "vm.delete":
		f.state, f.config = "", nil
		return ok()
	case "vm.info":
		if f.state == "" {
			return answer{status: http.StatusNotFound}
		}
		return answer{status: http.StatusOK, body: map[string]any{"config": f.config, "state": f.state}}
	case "vm.counters":
		return answer{status: http.StatusOK, body: chapi.VmCounters{"disk0": {"read_bytes": 4096, "write_bytes": 0}}}
	case "vm.snapshot":
		return f.snapshot(body)
	case "vm.restore":
		return f.restore(body, fds)
	case "vm.add-net":
		return f.addNet(body, fds)
	}
	return offSpec("the fake does not implement " + endpoint)
}

// transition moves from → to. notCreated answers a request without a VM;
// wrongState (0: none documented) one in another state.
func (f *fakeCH) transition(from, to chapi.VmState, notCreated, wrongState int) answer {
	switch {
	case f.state == "":
		return status(notCreated)
	case f.state == from:
		f.state = to
		return ok()
	case wrongState != 0:
		return status(wrongState)
	}
	return offSpec(fmt.Sprintf("no documented answer in state %s", f.state))
}

func (f *fakeCH) create(body []byte) answer {
	if f.state != "" {
		return offSpec("vm.create on a created VM")
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(body, &cfg); err != nil {
		return offSpec("vm.create: " + err.Error())
	}
	var vc chapi.VmConfig
	_ = json.Unmarshal(body, &vc)
	if why := f.checkPaths(vc); why != "" {
		return offSpec(why)
	}
	f.state, f.config = chapi.VmStateCreated, cfg
	return f.listenVsock(vc)
}

// checkPaths reports a config whose files Cloud Hypervisor could not open.
func (f *fakeCH) checkPaths(vc chapi.VmConfig) string {
	var paths []string
	if vc.Payload.Kernel != nil {
		paths = append(paths, *vc.Payload.Kernel)
	}
	if vc.Disks != nil {
		for _, d := range *vc.Disks {
			if d.Path != nil {
				paths = append(paths, *d.Path)
			}
		}
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return "config names a missing file: " + err.Error()
		}
	}
	return ""
}

// listenVsock serves the hybrid vsock socket of vc like CH in front of a
// guest whose agent echoes on channel.AgentPort: CONNECT to that port is
// answered OK and the stream then echoes. Other ports, and every port until
// opts.guestUp has passed, get their stream closed without an answer, as
// CH does when the guest resets the connection or does not answer. With
// opts.agent, a vmmtest.Guest (paused for a restored VM) serves the ports
// instead of the echo.
func (f *fakeCH) listenVsock(vc chapi.VmConfig) answer {
	if vc.Vsock == nil {
		return ok()
	}
	l, err := net.Listen("unix", vc.Vsock.Socket)
	if err != nil {
		return offSpec("vsock socket: " + err.Error())
	}
	f.vsock = l
	if f.opts.agent {
		g, err := vmmtest.NewGuest("fake", deref(vc.Payload.Cmdline), slog.New(slog.NewTextHandler(os.Stderr, nil)))
		if err != nil {
			return offSpec("fake guest: " + err.Error())
		}
		if f.state == chapi.VmStatePaused {
			g.Pause()
		}
		f.guest = g
	}
	upAt := time.Now().Add(f.opts.guestUp)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if !f.track(c) {
				return
			}
			go f.serveVsock(c, upAt)
		}
	}()
	return ok()
}

// serveVsock answers one hybrid vsock connection (see listenVsock).
func (f *fakeCH) serveVsock(c net.Conn, upAt time.Time) {
	defer c.Close()
	port, cc, err := channel.Accept(c)
	if err != nil || time.Now().Before(upAt) {
		return
	}
	f.mu.Lock()
	g := f.guest
	f.mu.Unlock()
	if g == nil {
		if port == channel.AgentPort && channel.Reply(cc, port, true) == nil {
			_, _ = io.Copy(cc, cc)
		}
		return
	}
	gc, err := g.Dial(context.Background(), port)
	if err != nil {
		return
	}
	defer gc.Close()
	if channel.Reply(cc, port, true) != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(gc, cc); done <- struct{}{} }()
	go func() { _, _ = io.Copy(cc, gc); done <- struct{}{} }()
	<-done // either end closed: close both
}

// closeGuest ends the fake guest, and the processes its agent started.
func (f *fakeCH) closeGuest() {
	f.mu.Lock()
	g := f.guest
	f.mu.Unlock()
	if g == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = g.Close(ctx)
}

func (f *fakeCH) snapshot(body []byte) answer {
	switch f.state {
	case "":
		return status(http.StatusNotFound)
	case chapi.VmStatePaused:
	default:
		return status(http.StatusMethodNotAllowed) // CH snapshots only paused VMs
	}
	var sc chapi.VmSnapshotConfig
	_ = json.Unmarshal(body, &sc)
	dir, okURL := strings.CutPrefix(deref(sc.DestinationUrl), "file://")
	if fi, err := os.Stat(dir); !okURL || err != nil || !fi.IsDir() {
		return offSpec(fmt.Sprintf("destination_url %q is not a file:// URL of a directory", deref(sc.DestinationUrl)))
	}
	cfg := map[string]json.RawMessage{}
	for k, v := range f.config {
		cfg[k] = v
	}
	// A field that the spec does not know, as a newer CH would write.
	cfg["fake_unknown_field"] = json.RawMessage(`{"kept":true}`)
	files := map[string][]byte{
		configFile:   mustJSON(cfg),
		"state.json": []byte(`{"fake":"device state"}`),
		memoryFile:   bytes.Repeat([]byte("guest memory "), 512),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return offSpec("write snapshot: " + err.Error())
		}
	}
	return ok()
}

func (f *fakeCH) restore(body []byte, fds []int) answer {
	if f.state != "" {
		return status(http.StatusNotFound) // documented: "already created"
	}
	var rc restoreConfig
	_ = json.Unmarshal(body, &rc)
	dir, okURL := strings.CutPrefix(rc.SourceUrl, "file://")
	raw, err := os.ReadFile(filepath.Join(dir, configFile))
	if !okURL || err != nil {
		return status(http.StatusBadRequest)
	}
	if _, err := os.Stat(filepath.Join(dir, memoryFile)); err != nil {
		return status(http.StatusBadRequest)
	}
	if why := f.validateSchema("VmConfig", raw); why != "" {
		return offSpec("restored config.json: " + why)
	}
	var cfg map[string]json.RawMessage
	var vc struct {
		chapi.VmConfig
		Net []struct {
			ID string `json:"id"`
		} `json:"net"`
	}
	_ = json.Unmarshal(raw, &cfg)
	_ = json.Unmarshal(raw, &vc)
	want := 0
	for _, n := range rc.NetFDs {
		want += n.NumFDs
		if !containsNet(vc.Net, n.ID) {
			return status(http.StatusBadRequest)
		}
	}
	if want != len(fds) {
		return status(http.StatusBadRequest)
	}
	if why := f.checkPaths(vc.VmConfig); why != "" {
		return offSpec(why)
	}
	f.state, f.config = chapi.VmStatePaused, cfg
	return f.listenVsock(vc.VmConfig)
}

func containsNet(nets []struct {
	ID string `json:"id"`
}, id string) bool {
	for _, n := range nets {
		if n.ID == id {
			return true
		}
	}
	return false
}

func (f *fakeCH) addNet(body []byte, fds []int) answer {
	if f.state == "" {
		return status(http.StatusNotFound)
	}
	var nc chapi.NetConfig
	_ = json.Unmarshal(body, &nc)
	if len(fds) == 0 && nc.Tap == nil {
		return status(http.StatusBadRequest)
	}
	var nets []map[string]any
	_ = json.Unmarshal(f.config["net"], &nets)
	for _, n := range nets {
		if n["id"] == deref(nc.Id) {
			return status(http.StatusConflict)
		}
	}
	// CH keeps descriptors out of serialized configs: they read back as -1.
	invalid := make([]int, len(fds))
	for i := range invalid {
		invalid[i] = -1
	}
	n := map[string]any{"id": deref(nc.Id), "fds": invalid}
	if nc.RateLimiterConfig != nil {
		n["rate_limiter_config"] = nc.RateLimiterConfig
	}
	nets = append(nets, n)
	f.config["net"] = mustJSON(nets)
	if f.state == chapi.VmStateCreated {
		return ok() // cold-added
	}
	return answer{status: http.StatusOK, body: chapi.PciDeviceInfo{Id: deref(nc.Id), Bdf: "0000:00:06.0"}}
}

// validateSchema checks raw against a component schema of the spec.
func (f *fakeCH) validateSchema(name string, raw []byte) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return err.Error()
	}
	s := f.spec.doc.Components.Schemas[name]
	if err := s.Value.VisitJSON(v, openapi3.MultiErrors()); err != nil {
		return err.Error()
	}
	return ""
}

// readFD returns the first bytes of a received file, to show which file it is.
func readFD(fd int) string {
	b := make([]byte, 64)
	n, err := unix.Pread(fd, b, 0)
	if err != nil {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil {
			return "<invalid fd>"
		}
		return "<unreadable>"
	}
	return string(b[:n])
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
