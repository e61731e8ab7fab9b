// Package hostd wires the daemon together: store, VMM driver, sandbox manager
// and HTTP API. cmd/hostd and `agentbox serve` call Run.
package hostd

import (
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/agentbox/agentbox/hostd/api"
	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/vmm"
)

// DefaultListen is where hostd listens unless told otherwise.
const DefaultListen = "127.0.0.1:7070"

// DefaultDataDir holds hostd's state unless told otherwise.
const DefaultDataDir = "/var/lib/agentbox"

// DefaultCacheDir holds the guest kernel, initramfs and base image that the
// kernel/ and images/ scripts build (override with AGENTBOX_CACHE).
const DefaultCacheDir = "/var/cache/agentbox"

// Config is hostd's configuration. Zero values take the defaults above.
type Config struct {
	// Listen is the API's TCP address.
	Listen string
	// DataDir holds agentbox.db, api-key and sandboxes/.
	DataDir string
	// APIKey, if set, is accepted in addition to the stored keys.
	APIKey string
	// Kernel, Initramfs and BaseImage are the guest's boot assets.
	Kernel    string
	Initramfs string
	BaseImage string
	// Images configures templates built from OCI images (images.go).
	Images ImageConfig
	// Builds makes the builder of templates from a Dockerfile or a
	// blueprint (POST /v1/templates/build) from self, which returns
	// hostd's own API address once it listens (templatebuild.Builder:
	// hostd does not link the client, its main wires it in); nil answers
	// such builds with 501.
	Builds func(self func() string) api.TemplateBuilds
	// VMM is auto, qemu or cloud-hypervisor.
	VMM string
	// Driver, if set, is the VMM driver to use as it is, and VMM and Accel
	// are not read: an embedder's own backend (`make bench` runs a hostd
	// over vmmtest's in-process driver, the agent without an emulator).
	Driver vmm.Driver
	// NoCgroups runs sandboxes without VMM cgroups, as on a host that has
	// none (no CPU quota or host memory caps): for a Driver whose VMs are
	// not processes.
	NoCgroups bool
	// Accel is auto, kvm or tcg (QEMU).
	Accel string
	// TCGTBSizeMiB, if set, bounds each QEMU's TCG translation cache
	// (-accel tcg,tb-size=N; QEMU's default is much larger): less host
	// memory per sandbox under TCG, at some retranslation.
	TCGTBSizeMiB int
	// DefaultVCPUs and DefaultMemoryMiB size sandboxes that don't say.
	DefaultVCPUs     int
	DefaultMemoryMiB int
	// Network is "proxy" (default: every sandbox gets a NIC behind the
	// egress proxy, see hostd/sandboxnet) or "off" (no sandbox has a NIC).
	Network string
	// EgressHosts maps upstream names to addresses for the egress proxy,
	// before the host's resolver (split DNS; tests' upstreams).
	EgressHosts map[string]string
	// EgressConnsPerSandbox caps each sandbox's concurrent connections to
	// the egress proxy (0: egress.DefaultMaxConns, 512).
	EgressConnsPerSandbox int
	// ServiceConnsPerSandbox caps each sandbox's concurrent service-URL
	// requests (0: portproxy.DefaultMaxConns, 256).
	ServiceConnsPerSandbox int
	// EgressUpstreamCA is a PEM file of extra roots the proxy trusts for
	// upstream TLS (tests only).
	EgressUpstreamCA string
	// Logger receives hostd's logs.
	Logger *slog.Logger
	// Limits are the defaults and maximums of sandboxes' resource limits
	// (see limits.go for the built-in ones).
	Limits sandbox.LimitOptions
	// KeyMaximums are per-API-key maximums, by key name (the name stored
	// with the key: "api-key" for DATA_DIR/api-key, "env" for
	// AGENTBOX_API_KEY).
	KeyMaximums map[string]sandbox.Maximums
	// MemoryOvercommit and VCPUOvercommit are how many times the host's
	// memory and CPUs its sandboxes may be promised; MemoryReserveMiB is
	// the host memory a new sandbox must leave available (0: the defaults,
	// sandbox.DefaultMemoryOvercommit and the others).
	MemoryOvercommit, VCPUOvercommit float64
	MemoryReserveMiB                 int
	// ProjectQuotas bound what each named project holds at once.
	ProjectQuotas map[string]api.Quota
	// VMMUIDs is the range of uids, "FIRST-LAST", from which each
	// sandbox's QEMU gets a uid (and gid) of its own to drop to once it has
	// opened its files (-runas; see hostd/sandbox jail.go). Empty is
	// DefaultVMMUIDs; "off" keeps the VMMs root.
	VMMUIDs string
	// VMMUser, if set, is instead the one unprivileged user that every
	// QEMU drops to (e.g. "nobody"); "root" keeps them root.
	VMMUser string
	// LeaveRunning leaves the running sandboxes running when hostd stops
	// (sandbox.Manager.Release): the next hostd on DataDir re-adopts them.
	// Unset, hostd stops their VMs and marks them failed (what in-process
	// tests want); `agentbox serve` sets it unless --drain-on-exit.
	LeaveRunning bool
	// DrainOnExit deletes every sandbox when hostd stops.
	DrainOnExit bool
	// ShutdownTimeout bounds how long a stopping hostd waits for requests
	// in flight (exec streams, file transfers) before it cuts them
	// (default 10 s).
	ShutdownTimeout time.Duration
	// Instance names this hostd's cgroups (/agentbox/<instance>/...);
	// empty derives it from DataDir, so hostds with their own data
	// directories never share groups.
	Instance string
	// Domain enables host-based service URLs, {port}-{sandbox}.{Domain}
	// (a wildcard DNS name pointing at the host is the operator's job);
	// path-based ones, /v1/sandboxes/{id}/ports/{port}/, always work.
	Domain string
	// TLSCert and TLSKey, if both set, make hostd serve HTTPS (HTTP/1.1 and
	// HTTP/2 by ALPN) instead of cleartext HTTP/1.1 and h2c.
	TLSCert, TLSKey string
	// OTLPEndpoint, if set, is where hostd sends its trace spans (API
	// requests and flight-recorder events) over OTLP/HTTP: "host:port"
	// (plain HTTP) or an http(s):// URL. Off by default.
	OTLPEndpoint string
	// Recorder is "on" (default: the flight recorder keeps every
	// sandbox's event log) or "off" (no events are kept; the events
	// route answers 501).
	Recorder string
	// EventRetention, if set, drops events older than it (checked with
	// the reaper's round); zero keeps the log forever.
	EventRetention time.Duration
	// ReapInterval is how often the reaper looks for cgroups, VMMs and
	// sandbox directories that no sandbox owns (default one minute); an
	// orphan goes at its second sighting.
	ReapInterval time.Duration
	// BaseSnapshots is "on" (default: a create with neither template nor
	// snapshot restores a built-in snapshot of the booted base image, made
	// by the first such create of each shape; see hostd/sandbox base.go) or
	// "off" (every such create boots the base image).
	BaseSnapshots string
	// BasePool is how many paused sandboxes of the default shape's base
	// snapshot are kept warm for creates to claim (default 1; negative:
	// none).
	BasePool int
	// MountRoots are the host directories under which sandboxes' host
	// mounts may take their source; none disables host mounts.
	MountRoots []string
	// Fleet, with its DB set, makes hostd one host of a fleet (fleet.go).
	Fleet FleetConfig
	// SnapshotStore, with its URL set, makes pauses durable in an object
	// store and lets hostd import sandboxes from it (snapstore.go).
	SnapshotStore SnapshotStoreConfig
	// Now, if set, is the clock that service URLs' share links expire by
	// (tests, which move it instead of waiting); nil is time.Now.
	Now func() time.Time
}

// CacheDir returns AGENTBOX_CACHE or DefaultCacheDir.
func CacheDir() string {
	if d := os.Getenv("AGENTBOX_CACHE"); d != "" {
		return d
	}
	return DefaultCacheDir
}

// DefaultInitramfs is AGENTBOX_INITRAMFS, else initramfs.cpio beside the
// running executable (`make build` puts both in bin/), else the one in the
// cache directory.
func DefaultInitramfs() string {
	if p := os.Getenv("AGENTBOX_INITRAMFS"); p != "" {
		return p
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "initramfs.cpio")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return filepath.Join(CacheDir(), "initramfs.cpio")
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	cache := CacheDir()
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.Listen, DefaultListen)
	def(&c.DataDir, DefaultDataDir)
	def(&c.Kernel, filepath.Join(cache, "kernel", "vmlinux"))
	def(&c.Initramfs, DefaultInitramfs())
	def(&c.BaseImage, filepath.Join(cache, "images", "base.qcow2"))
	def(&c.VMM, "auto")
	def(&c.Accel, "auto")
	def(&c.Network, "proxy")
	def(&c.Recorder, "on")
	def(&c.BaseSnapshots, "on")
	if c.BasePool == 0 {
		c.BasePool = 1
	}
	if c.DefaultVCPUs == 0 {
		c.DefaultVCPUs = 1
	}
	if c.DefaultMemoryMiB == 0 {
		c.DefaultMemoryMiB = 512
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 10 * time.Second
	}
	return c
}
