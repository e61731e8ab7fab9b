package hostd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentbox/agentbox/hostd/api"
	"github.com/agentbox/agentbox/hostd/auth"
	"github.com/agentbox/agentbox/hostd/console"
	"github.com/agentbox/agentbox/hostd/egress"
	"github.com/agentbox/agentbox/hostd/internal/fdbudget"
	"github.com/agentbox/agentbox/hostd/metrics"
	"github.com/agentbox/agentbox/hostd/mounts"
	"github.com/agentbox/agentbox/hostd/portproxy"
	"github.com/agentbox/agentbox/hostd/recorder"
	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/vmm"
)

// Run starts hostd and serves until ctx ends, then stops (Config.LeaveRunning:
// releases) every sandbox and returns (RunWithReady also reports the bound address).
func Run(ctx context.Context, cfg Config) error {
	return RunWithReady(ctx, cfg, nil)
}

// RunWithReady is Run with a callback for the bound address (tests listen on
// port 0).
func RunWithReady(ctx context.Context, cfg Config, ready func(addr string)) error {
	cfg = cfg.WithDefaults()
	log := cfg.Logger
	var err error
	if cfg.Fleet, err = cfg.Fleet.withDefaults(); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("hostd: data dir: %w", err)
	}
	st, err := store.Open(ctx, filepath.Join(cfg.DataDir, "agentbox.db"))
	if err != nil {
		return fmt.Errorf("hostd: %w", err)
	}
	defer st.Close()
	if _, err := auth.Bootstrap(ctx, st, cfg.DataDir, cfg.APIKey); err != nil {
		return fmt.Errorf("hostd: api key: %w", err)
	}
	base, err := filepath.EvalSymlinks(cfg.BaseImage)
	if err != nil {
		return fmt.Errorf("hostd: base image: %w (run `make assets`)", err)
	}
	drv, health, err := chooseDriver(ctx, cfg)
	if err != nil {
		return err
	}
	log.Info("vmm chosen", "vmm", health.VMM, "accel", health.Accel)
	met := metrics.New()
	// The proxies that serve guests stop taking connections short of the
	// descriptor limit; the reserve is the API's, the store's and the VMMs'.
	fds, err := fdbudget.FromRlimit()
	if err != nil {
		return fmt.Errorf("hostd: %w", err)
	}
	log.Info("guest connections' descriptor budget", "max", fds.Max())
	network, box, err := newNetwork(cfg, st, met, fds)
	if err != nil {
		return err
	}
	tp, err := recorder.NewTracerProvider(ctx, cfg.OTLPEndpoint)
	if err != nil {
		return fmt.Errorf("hostd: %w", err)
	}
	defer shutdownTracer(tp, log)
	tracer := tp.Tracer("github.com/agentbox/agentbox/hostd")
	rec, events, err := newRecorder(cfg, st, tracer, met.Recorded)
	if err != nil {
		return err
	}
	opts := sandbox.Options{
		Driver: drv, Store: st, DataDir: cfg.DataDir,
		Kernel: cfg.Kernel, Initramfs: cfg.Initramfs, BaseImage: base,
		DefaultVCPUs: cfg.DefaultVCPUs, DefaultMemoryMiB: cfg.DefaultMemoryMiB, Logger: log,
		Network: network,
		Limits:  cfg.Limits, KeyMax: cfg.KeyMaximums, Metrics: met, Recorder: rec, EventRetention: cfg.EventRetention,
		Mounts:        mounts.Config{HostRoots: cfg.MountRoots, Secrets: box, GitHosts: cfg.EgressHosts, GitCAFile: cfg.EgressUpstreamCA},
		BaseSnapshots: cfg.BaseSnapshots != "off", BasePool: max(cfg.BasePool, 0), MaxSandboxes: cfg.Fleet.MaxSandboxes,
		MemoryOvercommit: cfg.MemoryOvercommit, VCPUOvercommit: cfg.VCPUOvercommit, MemoryReserveMiB: cfg.MemoryReserveMiB,
	}
	snapStore, err := openSnapshotStore(cfg.SnapshotStore, cfg.DataDir, cfg)
	if err != nil {
		return err
	}
	if snapStore != nil {
		defer snapStore.Close()
		opts.SnapshotStore, opts.HostName = snapStore, cfg.Fleet.Host
		if opts.HostName == "" {
			opts.HostName, _ = os.Hostname()
		}
		log.Info("snapshot store: pauses are durable there", "url", cfg.SnapshotStore.URL)
	}
	durable := &fleetDurability{}
	if snapStore != nil && cfg.Fleet.On() {
		opts.Durability = durable
	}
	if err := vmmJail(cfg, drv, log, &opts); err != nil {
		return err
	}
	cg, err := openCgroups(cfg, log)
	if err != nil {
		return err
	}
	if cg != nil {
		opts.Cgroups = cg
	}
	defer closeCgroups(cg, log)
	mgr, err := sandbox.New(opts)
	if err != nil {
		return fmt.Errorf("hostd: %w", err)
	}
	if ns, ok := network.(interface{ OnEvent(func(egress.Event)) }); ok {
		ns.OnEvent(mgr.RecordNetwork)
	}
	if err := mgr.Recover(ctx); err != nil {
		return fmt.Errorf("hostd: recover: %w", err)
	}
	met.Watch(mgr)
	// The reaper stops when hostd starts stopping (ctx) or Run returns,
	// which waits for its last round.
	rctx, stopReaper := context.WithCancel(ctx)
	reaped := make(chan struct{})
	go func() { defer close(reaped); mgr.Reap(rctx, cfg.ReapInterval) }() // zero: sandbox.DefaultReapInterval
	defer func() { stopReaper(); <-reaped }()
	var authn principalAuth = auth.New(st)
	if cfg.Fleet.On() {
		// A caller's key does not reach a fleet's host: the control
		// plane calls it with the host's token.
		authn = fleetAuth(cfg.Fleet)
	}
	ports, err := portproxy.New(portproxy.Options{Sandboxes: mgr, Auth: tenantAuth{authn, st}, Domain: cfg.Domain, DataDir: cfg.DataDir, Logger: log, Now: cfg.Now,
		MaxConnsPerSandbox: cfg.ServiceConnsPerSandbox, Budget: fds})
	if err != nil {
		return fmt.Errorf("hostd: %w", err)
	}
	defer ports.Close()
	// A sandbox's service records go with it to a host that imports it.
	mgr.SetServiceRecords(ports)
	images, err := newImageTemplates(cfg, st, mgr.Service(), box, log)
	if err != nil {
		return fmt.Errorf("hostd: %w", err)
	}
	var self atomic.Pointer[string]
	var builds api.TemplateBuilds
	if cfg.Builds != nil {
		builds = cfg.Builds(func() string {
			if u := self.Load(); u != nil {
				return *u
			}
			return ""
		})
	}
	handler := api.New(api.Options{Manager: mgr.Service(), Builds: builds, BuildDir: filepath.Join(cfg.DataDir, "tmp"), Auth: authn, Health: func() api.HealthInfo { return health }, Logger: log, Ports: ports,
		Network: mgr, Secrets: box, Metrics: met.Handler(), Events: events, Tracer: tracer, Images: images,
		Tenancy: st, Quotas: cfg.ProjectQuotas, DefaultVCPUs: cfg.DefaultVCPUs, DefaultMemoryMiB: cfg.DefaultMemoryMiB,
		RotateKey: func(ctx context.Context) (string, error) { return auth.Rotate(ctx, st, cfg.DataDir) }})
	var fleet *fleetMember
	defer func() { fleet.stop() }()
	listening := func(addr string) {
		u := selfURL(cfg, addr)
		self.Store(&u)
		if cfg.Fleet.On() {
			fleet = startFleet(ctx, cfg, mgr, st, addr, log, durable)
		}
		if ready != nil {
			ready(addr)
		}
	}
	return serve(ctx, cfg, ports.Wrap(console.Mount(handler)), mgr, log, listening)
}

func serve(ctx context.Context, cfg Config, h http.Handler, mgr *sandbox.Manager, log *slog.Logger, ready func(string)) error {
	l, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("hostd: listen: %w", err)
	}
	// No read, write or idle timeouts cut a request once its headers are
	// in: exec streams, terminals and service URLs live as long as they are
	// used (their keepalives keep proxies from cutting them).
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second, Protocols: protocols(cfg)}
	errc := make(chan error, 1)
	tls := cfg.TLSCert != "" && cfg.TLSKey != ""
	go func() {
		if tls {
			errc <- srv.ServeTLS(l, cfg.TLSCert, cfg.TLSKey)
			return
		}
		errc <- srv.Serve(l)
	}()
	log.Info("hostd listening", "addr", l.Addr().String(), "tls", tls, "domain", cfg.Domain)
	if ready != nil {
		ready(l.Addr().String())
	}
	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	log.Info("hostd stopping", "leave_running", cfg.LeaveRunning && !cfg.DrainOnExit, "drain", cfg.DrainOnExit)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout+20*time.Second)
	defer cancel()
	if !cfg.LeaveRunning || cfg.DrainOnExit {
		// Close (or delete) the sandboxes first: that ends running exec
		// streams, which Shutdown would otherwise wait for.
		cerr := drain(sctx, mgr, cfg.DrainOnExit, log)
		serr := srv.Shutdown(sctx)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		return errors.Join(err, cerr, serr)
	}
	// Stop accepting, let requests in flight finish within the deadline,
	// cut the rest; then let go of the sandboxes, which run on.
	hctx, hcancel := context.WithTimeout(sctx, cfg.ShutdownTimeout)
	serr := srv.Shutdown(hctx)
	hcancel()
	if errors.Is(serr, context.DeadlineExceeded) {
		log.Warn("requests still in flight at the shutdown deadline; cutting them", "timeout", cfg.ShutdownTimeout)
		serr = srv.Close()
	}
	cerr := mgr.Release(sctx)
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return errors.Join(err, cerr, serr)
}

// drain stops every sandbox (marking them failed) or, with del, deletes
// them all.
func drain(ctx context.Context, mgr *sandbox.Manager, del bool, log *slog.Logger) error {
	if del {
		list, err := mgr.List(ctx)
		if err != nil {
			return errors.Join(err, mgr.Close(ctx))
		}
		for _, sb := range list {
			if err := mgr.Delete(ctx, sb.ID); err != nil {
				log.Error("drain: delete sandbox", "sandbox_id", sb.ID, "err", err)
			}
		}
	}
	return mgr.Close(ctx)
}

// protocols are HTTP/1.1 and HTTP/2: over TLS by ALPN, and in cleartext
// with prior knowledge (h2c), so HTTP/2 clients of service URLs pass.
func protocols(cfg Config) *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	if cfg.TLSCert != "" {
		p.SetHTTP2(true)
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	return p
}

// validVMM lists the accepted values of Config.VMM.
var validVMM = map[string]bool{"auto": true, "qemu": true, "cloud-hypervisor": true}

func parseAccel(s string) (vmm.Accel, error) {
	switch s {
	case "", "auto":
		return vmm.AccelAuto, nil
	case "kvm":
		return vmm.AccelKVM, nil
	case "tcg":
		return vmm.AccelTCG, nil
	}
	return "", fmt.Errorf("hostd: accel %q: want auto, kvm or tcg", s)
}

// shutdownTracer flushes the spans not yet sent.
func shutdownTracer(tp interface{ Shutdown(context.Context) error }, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tp.Shutdown(ctx); err != nil {
		log.Warn("trace export shutdown", "err", err)
	}
}

// newRecorder returns the flight recorder, and the same as the API's
// event log (nil for both when cfg turns it off).
func newRecorder(cfg Config, st *store.Store, tracer trace.Tracer, counted func(string, int)) (*recorder.Recorder, api.EventLog, error) {
	switch cfg.Recorder {
	case "off":
		return nil, nil, nil
	case "on":
	default:
		return nil, nil, fmt.Errorf("hostd: recorder %q: want on or off", cfg.Recorder)
	}
	if cfg.OTLPEndpoint == "" {
		// Nowhere to send the events' spans: building them (each event's
		// data decoded again for its attributes) was an eighth of the
		// recorder's cost per exec.
		tracer = nil
	}
	rec := recorder.New(recorder.Options{Store: st, Tracer: tracer, KeyName: api.KeyID, Counted: counted, Logger: cfg.Logger})
	return rec, rec, nil
}

// selfURL is hostd's own API address, listening on addr (on loopback
// when it listens on every address).
func selfURL(cfg Config, addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err == nil {
		if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
			host = "127.0.0.1"
		}
		addr = net.JoinHostPort(host, port)
	}
	if cfg.TLSCert != "" && cfg.TLSKey != "" {
		return "https://" + addr
	}
	return "http://" + addr
}
