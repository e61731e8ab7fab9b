// Package cloudhypervisor is the Cloud Hypervisor backend of vmm.Driver: one
// cloud-hypervisor process per sandbox, driven over its REST API on a unix
// socket with a client generated from the pinned OpenAPI spec (package
// chapi), with the agent channel on the VM's hybrid vsock socket.
//
// The VMM runs with seccomp, with Landlock where the kernel has it (granting
// only the sandbox's own paths), and with its event monitor writing to the
// VM's directory. Snapshots belong to this backend: Snapshot marks them and
// Restore refuses any other. The VMM outlives hostd: Release leaves it and
// its sockets in place, and a later hostd's Adopt reconnects to it (see
// adopt.go).
package cloudhypervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/agentbox/agentbox/vmm"
	"github.com/agentbox/agentbox/vmm/cloudhypervisor/chapi"
)

// BackendName is the driver's Name and the content of a snapshot's marker.
const BackendName = "cloud-hypervisor"

// EnvBinary overrides where the cloud-hypervisor binary is looked up.
const EnvBinary = "AGENTBOX_CH_BIN"

// Options configure a Driver. The zero value of every field but DataDirs
// takes a default.
type Options struct {
	// Binary is the cloud-hypervisor executable. Empty: $AGENTBOX_CH_BIN,
	// then "cloud-hypervisor" on $PATH.
	Binary string
	// DataDirs are the directories that may hold disk images: hostd's data
	// directory and the image cache. Every image of a disk's backing chain
	// must resolve inside one of them. Required.
	DataDirs []string
	// DisableLandlock turns Landlock off even where the kernel supports it.
	DisableLandlock bool
	// MemoryRestoreMode picks how a restore loads guest memory. Empty:
	// OnDemand (userfaultfd) where this host lets us open a userfaultfd,
	// Copy otherwise.
	MemoryRestoreMode chapi.MemoryRestoreMode
	// Logger receives the driver's logs; nil means slog.Default().
	Logger *slog.Logger
}

// Driver starts Cloud Hypervisor VMs.
type Driver struct {
	bin         string
	roots       []string
	landlock    bool
	restoreMode chapi.MemoryRestoreMode
	log         *slog.Logger
	env         []string // extra environment for the VMM (tests use it)
}

var _ vmm.Driver = (*Driver)(nil)

// Available returns the path of the cloud-hypervisor binary that New would
// use without Options.Binary, or an error wrapping vmm.ErrBinaryNotFound.
func Available() (path string, err error) { return findBinary("") }

// New checks opts and the host and returns a Driver. It fails at once, with
// an error wrapping vmm.ErrBinaryNotFound, when the binary is missing.
func New(opts Options) (*Driver, error) {
	bin, err := findBinary(opts.Binary)
	if err != nil {
		return nil, err
	}
	if len(opts.DataDirs) == 0 {
		return nil, fmt.Errorf("%w: cloudhypervisor: Options.DataDirs is empty", vmm.ErrInvalidConfig)
	}
	d := &Driver{bin: bin, log: opts.Logger, restoreMode: opts.MemoryRestoreMode}
	if d.log == nil {
		d.log = slog.Default()
	}
	for _, dir := range opts.DataDirs {
		root, err := resolveDir(dir)
		if err != nil {
			return nil, fmt.Errorf("%w: cloudhypervisor: data dir: %v", vmm.ErrInvalidConfig, err)
		}
		d.roots = append(d.roots, root)
	}
	switch d.restoreMode {
	case "":
		d.restoreMode = chapi.MemoryRestoreModeCopy
		if userfaultfdWorks() {
			d.restoreMode = chapi.MemoryRestoreModeOnDemand
		}
	case chapi.MemoryRestoreModeCopy, chapi.MemoryRestoreModeOnDemand:
	default:
		return nil, fmt.Errorf("%w: cloudhypervisor: memory restore mode %q", vmm.ErrInvalidConfig, d.restoreMode)
	}
	abi := landlockABI()
	d.landlock = !opts.DisableLandlock && abi >= landlockMinABI
	d.log.Info("cloud-hypervisor driver", "binary", bin, "landlock", d.landlock,
		"landlock_abi", abi, "memory_restore_mode", d.restoreMode)
	return d, nil
}

// resolveDir returns dir absolute and with symlinks resolved, as image
// paths are compared. A dir that does not exist (yet) holds no image now,
// and is kept as written.
func resolveDir(dir string) (string, error) {
	resolved, err := filepath.EvalSymlinks(dir)
	if errors.Is(err, os.ErrNotExist) {
		resolved, err = dir, nil
	}
	if err != nil {
		return "", err
	}
	return filepath.Abs(resolved)
}

func findBinary(explicit string) (string, error) {
	name, from := explicit, "Options.Binary"
	if name == "" {
		name, from = os.Getenv(EnvBinary), "$"+EnvBinary
	}
	if name == "" {
		name, from = "cloud-hypervisor", "$PATH"
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%w: cloud-hypervisor (%q from %s): %v; install the static release binary "+
			"(see vmm/cloudhypervisor/README.md), or set %s or choose vmm = qemu",
			vmm.ErrBinaryNotFound, name, from, err, EnvBinary)
	}
	return filepath.Abs(path)
}

// validate checks cfg for this backend: it cannot drop privileges itself
// (cfg.RunAs).
func validate(cfg vmm.Config) error {
	if cfg.RunAs != nil {
		return fmt.Errorf("%w: cloud-hypervisor cannot run as %s (RunAs)", vmm.ErrUnsupported, cfg.RunAs)
	}
	return cfg.Validate()
}

// Name returns "cloud-hypervisor".
func (d *Driver) Name() string { return BackendName }

// Start launches cloud-hypervisor, creates the VM from cfg and boots it.
func (d *Driver) Start(ctx context.Context, cfg vmm.Config) (vmm.VM, error) {
	if err := validate(cfg); err != nil {
		return nil, err
	}
	backing, err := checkDisks(cfg.Disks, d.roots)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", vmm.ErrInvalidConfig, err)
	}
	v, err := d.launch(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := v.api.Create(ctx, d.vmConfig(cfg, v.paths, backing)); err != nil {
		return nil, v.abort(ctx, err)
	}
	if cfg.Net != nil {
		// The tap goes in as SCM_RIGHTS with vm.add-net, before boot.
		if err := v.addNet(ctx, netConfig(cfg.Net), cfg.Net.Tap); err != nil {
			return nil, v.abort(ctx, err)
		}
	}
	if err := v.api.Do(ctx, actBoot); err != nil {
		return nil, v.abort(ctx, err)
	}
	return v, nil
}

// Restore launches cloud-hypervisor from a snapshot that Snapshot wrote into
// dir. The VM starts paused. See RestoreWithNets for VMs with taps.
// A VM with cfg.Net gets its new tap for the snapshot's network device.
func (d *Driver) Restore(ctx context.Context, cfg vmm.Config, dir string) (vmm.VM, error) {
	var nets []NetFiles
	if cfg.Net != nil {
		nets = []NetFiles{{ID: netID, Files: []*os.File{cfg.Net.Tap}}}
	}
	return d.RestoreWithNets(ctx, cfg, dir, nets)
}

// netID names the network device that Config.Net attaches.
const netID = "net0"

// NetFiles are new descriptors for a network device of a snapshot, which a
// snapshot cannot carry: usually one tap per device (two per queue pair).
type NetFiles struct {
	ID    string
	Files []*os.File
}

// RestoreWithNets is Restore for a snapshot of a VM with network devices
// added by VM.AddNet: nets gives each of them its new taps, sent as
// SCM_RIGHTS with the request (vm.restore's net_fds).
//
// The restored VM gets a directory of its own under cfg.Dir: config.json is
// rewritten there (vsock socket, disk paths, serial file and Landlock rules
// of cfg) and the other files are hard links into dir.
func (d *Driver) RestoreWithNets(ctx context.Context, cfg vmm.Config, dir string, nets []NetFiles) (vmm.VM, error) {
	if err := checkMarker(dir); err != nil {
		return nil, err
	}
	if err := validate(cfg); err != nil {
		return nil, err
	}
	backing, err := checkDisks(cfg.Disks, d.roots)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", vmm.ErrInvalidConfig, err)
	}
	p := pathsFor(cfg.Dir)
	edits := restoreEdits{
		vsockSocket:   p.vsock,
		serialFile:    cfg.ConsoleLog,
		landlock:      d.landlock,
		landlockRules: landlockRules(cfg, backing),
	}
	for _, disk := range cfg.Disks {
		edits.disks = append(edits.disks, disk.Path)
		edits.diskLimits = append(edits.diskLimits, rateLimiter(disk.BpsTotal))
	}
	if cfg.Net != nil {
		// The snapshot's limiter is its VM's; this sandbox's may differ.
		edits.netLimit = &netLimitEdit{id: netID, limiter: rateLimiter(cfg.Net.BpsTotal)}
	}
	rc := restoreConfig{RestoreConfig: chapi.RestoreConfig{
		SourceUrl:         fileURL(p.restore),
		MemoryRestoreMode: &d.restoreMode,
	}}
	var files []*os.File
	for _, n := range nets {
		rc.NetFDs = append(rc.NetFDs, restoredNet{ID: n.ID, NumFDs: len(n.Files)})
		files = append(files, n.Files...)
	}
	v, err := d.launch(ctx, cfg)
	if err != nil {
		return nil, err
	}
	// The copy is the VM's from here: its cleanup removes it.
	if err := prepareRestoreDir(dir, p.restore, edits); err != nil {
		return nil, v.abort(ctx, err)
	}
	if err := v.api.Restore(ctx, rc, files); err != nil {
		return nil, v.abort(ctx, err)
	}
	return v, nil
}

// vmPaths are the files of one VM inside its directory.
type vmPaths struct {
	api     string // --api-socket
	vsock   string // hybrid vsock socket
	events  string // --event-monitor
	log     string // the VMM's stdout and stderr
	staging string // where vm.snapshot writes before the move
	restore string // the restored snapshot's own copy
}

func pathsFor(dir string) vmPaths {
	j := func(name string) string { return filepath.Join(dir, name) }
	return vmPaths{
		api:     j("ch-api.sock"),
		vsock:   j("vsock.sock"),
		events:  j("ch-events.json"),
		log:     j("cloud-hypervisor.log"),
		staging: j("snapshot.partial"),
		restore: j("restored-snapshot"),
	}
}

// maxSocketPath is the longest path a unix socket address holds. Cloud
// Hypervisor also connects to "<vsock>_<port>" for guest-initiated streams,
// so the vsock socket leaves room for a port.
const maxSocketPath = 107

// launch starts cloud-hypervisor for cfg, calls cfg.Started with its pid,
// and waits until its API answers.
func (d *Driver) launch(ctx context.Context, cfg vmm.Config) (*VM, error) {
	p := pathsFor(cfg.Dir)
	if len(p.vsock)+len("_4294967295") > maxSocketPath {
		return nil, fmt.Errorf("%w: cloudhypervisor: Dir %s is too long for unix sockets", vmm.ErrInvalidConfig, cfg.Dir)
	}
	for _, s := range []string{p.api, p.vsock} {
		if err := os.Remove(s); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("cloudhypervisor: remove stale socket: %w", err)
		}
	}
	args := []string{
		"--api-socket", "path=" + p.api,
		"--seccomp", "true",
		"--event-monitor", "path=" + p.events,
		"-v",
	}
	proc, err := startProcess(d.bin, args, d.env, p.log)
	if err != nil {
		return nil, err
	}
	v := newVM(p, newRESTClient(p.api), proc, d.log.With("sandbox_id", cfg.ID))
	v.addCleanups()
	v.log.Info("cloud-hypervisor started", "vm_pid", proc.pid(), "api_socket", p.api)
	// Before vm.create and vm.boot, or vm.restore: no guest runs yet.
	if cfg.Started != nil {
		if err := cfg.Started(proc.pid()); err != nil {
			return nil, v.abort(ctx, fmt.Errorf("cloudhypervisor: started hook: %w", err))
		}
	}
	if err := v.waitReady(ctx); err != nil {
		return nil, v.abort(ctx, err)
	}
	return v, nil
}

// waitReady polls vmm.ping until the API answers, the process exits or ctx
// ends.
func (v *VM) waitReady(ctx context.Context) error {
	delay := 2 * time.Millisecond
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := v.api.Ping(pctx)
		cancel()
		if err == nil {
			return nil
		}
		t := time.NewTimer(delay)
		select {
		case <-v.proc.done:
			t.Stop()
			return fmt.Errorf("%w: cloud-hypervisor exited before its API answered (%v): %s", vmm.ErrNotRunning, v.proc.err, logTail(v.paths.log))
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("cloudhypervisor: waiting for the API socket: %w (last error: %v)", ctx.Err(), err)
		case <-t.C:
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

func removeAll(paths ...string) error {
	var errs []error
	for _, p := range paths {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// logTail returns the end of the VMM's log, for start errors.
func logTail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "(no log)"
	}
	defer f.Close()
	const n = 2048
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	b, _ := io.ReadAll(io.LimitReader(f, n))
	return fmt.Sprintf("log %s: %q", path, b)
}
