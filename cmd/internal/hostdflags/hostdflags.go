// Package hostdflags is hostd's command line, defined once: the flags that
// both cmd/hostd and `agentbox serve` take, and the hostd.Config they fill.
package hostdflags

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/agentbox/agentbox/fleet/hosttoken"
	"github.com/agentbox/agentbox/hostd"
	"github.com/agentbox/agentbox/hostd/api"
	"github.com/agentbox/agentbox/hostd/fleetagent"
	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/internal/templatebuild"
)

// Flags returns hostd's flags, all but --api-key: agentbox declares that
// one globally (its client commands use it too), and cmd/hostd adds
// APIKeyFlag.
func Flags() []cli.Flag {
	cache := hostd.CacheDir()
	return []cli.Flag{
		&cli.StringFlag{Name: "listen", Value: hostd.DefaultListen, Usage: "API address", Sources: cli.EnvVars("AGENTBOX_LISTEN")},
		&cli.StringFlag{Name: "data-dir", Value: hostd.DefaultDataDir, Usage: "state directory (agentbox.db, api-key, sandboxes/)", Sources: cli.EnvVars("AGENTBOX_DATA_DIR")},
		&cli.StringFlag{Name: "vmm", Value: "auto", Usage: "VMM backend: auto, qemu or cloud-hypervisor", Sources: cli.EnvVars("AGENTBOX_VMM"),
			Validator: oneOf("auto", "qemu", "cloud-hypervisor")},
		&cli.StringFlag{Name: "accel", Value: "auto", Usage: "accelerator: auto (probe), kvm or tcg", Sources: cli.EnvVars("AGENTBOX_ACCEL"),
			Validator: oneOf("auto", "kvm", "tcg")},
		&cli.IntFlag{Name: "tcg-tb-size", Usage: "TCG translation cache per VM in `MiB` (0: QEMU's default)"},
		&cli.StringFlag{Name: "kernel", Usage: "guest kernel, a PVH vmlinux (default " + filepath.Join(cache, "kernel", "vmlinux") + ")", Sources: cli.EnvVars("AGENTBOX_KERNEL")},
		&cli.StringFlag{Name: "initramfs", Usage: "guest initramfs (default initramfs.cpio beside this executable, else " + filepath.Join(cache, "initramfs.cpio") + ")",
			Sources: cli.EnvVars("AGENTBOX_INITRAMFS")},
		&cli.StringFlag{Name: "base-image", Usage: "base root filesystem, qcow2 (default " + filepath.Join(cache, "images", "base.qcow2") + ")", Sources: cli.EnvVars("AGENTBOX_BASE_IMAGE")},
		&cli.StringFlag{Name: "base-snapshots", Usage: "creates without a template restore a snapshot of the booted base image: on (default) or off",
			Sources: cli.EnvVars("AGENTBOX_BASE_SNAPSHOTS")},
		&cli.IntFlag{Name: "base-pool", Usage: "warm sandboxes of the base snapshot kept for creates to claim (0: the default, 1; -1: none)"},
		&cli.StringFlag{Name: "network", Value: "proxy", Usage: "sandbox networking: proxy (a NIC behind the egress proxy) or off (no NICs)",
			Sources: cli.EnvVars("AGENTBOX_NETWORK"), Validator: oneOf("proxy", "off")},
		&cli.StringMapFlag{Name: "egress-host", Usage: "resolve an upstream `NAME=ADDRESS` for the egress proxy before the host's resolver (repeatable)"},
		&cli.IntFlag{Name: "egress-conns-per-sandbox", Usage: "concurrent connections each sandbox may hold to the egress proxy (0: the default, 512)",
			Sources: cli.EnvVars("AGENTBOX_EGRESS_CONNS_PER_SANDBOX")},
		&cli.IntFlag{Name: "service-conns-per-sandbox", Usage: "concurrent service-URL requests each sandbox may serve (0: the default, 256)",
			Sources: cli.EnvVars("AGENTBOX_SERVICE_CONNS_PER_SANDBOX")},
		&cli.StringFlag{Name: "egress-upstream-ca", Usage: "PEM `FILE` of extra roots the egress proxy trusts for upstream TLS"},
		&cli.StringSliceFlag{Name: "mount-root", Usage: "allow sandboxes' host mounts under this host `DIR` (repeatable; none: no host mounts)", Sources: cli.EnvVars("AGENTBOX_MOUNT_ROOTS")},
		&cli.StringFlag{Name: "domain", Usage: "serve host-based service URLs at {port}-{sandbox}.DOMAIN (wildcard DNS to this host)", Sources: cli.EnvVars("AGENTBOX_DOMAIN")},
		&cli.StringFlag{Name: "tls-cert", Usage: "serve HTTPS (and HTTP/2) with this certificate (PEM)", Sources: cli.EnvVars("AGENTBOX_TLS_CERT")},
		&cli.StringFlag{Name: "tls-key", Usage: "the key of --tls-cert (PEM)", Sources: cli.EnvVars("AGENTBOX_TLS_KEY")},
		&cli.StringFlag{Name: "otlp-endpoint", Usage: "send trace spans over OTLP/HTTP to this host:port or URL (off when empty)", Sources: cli.EnvVars("AGENTBOX_OTLP_ENDPOINT")},
		&cli.StringFlag{Name: "recorder", Usage: "the flight recorder: on (default) or off", Sources: cli.EnvVars("AGENTBOX_RECORDER")},
		&cli.DurationFlag{Name: "event-retention", Usage: "drop flight-recorder events older than this (e.g. 720h; 0 keeps them)", Sources: cli.EnvVars("AGENTBOX_EVENT_RETENTION")},
		&cli.DurationFlag{Name: "reap-interval", Usage: "how often the reaper looks for orphaned VMMs, cgroups and sandbox directories (0: hostd's default, 1m)",
			Sources: cli.EnvVars("AGENTBOX_REAP_INTERVAL")},
		&cli.StringFlag{Name: "vmm-uids", Usage: "`FIRST-LAST` uids (and gids) from which each sandbox's QEMU gets its own to drop to after opening its files (default " +
			hostd.DefaultVMMUIDs + "; off: QEMU runs as root)", Sources: cli.EnvVars("AGENTBOX_VMM_UIDS")},
		&cli.StringFlag{Name: "vmm-user", Usage: "one unprivileged `USER` every QEMU drops to instead of a uid per sandbox (e.g. nobody; root: no drop)", Sources: cli.EnvVars("AGENTBOX_VMM_USER")},
		&cli.StringFlag{Name: "limits", Usage: "JSON file of default and maximum sandbox limits, and per-API-key maximums", Sources: cli.EnvVars("AGENTBOX_LIMITS")},
		&cli.FloatFlag{Name: "memory-overcommit", Usage: "how many times the host's memory its sandboxes may be promised (0: hostd's default, " +
			num(sandbox.DefaultMemoryOvercommit) + ")", Sources: cli.EnvVars("AGENTBOX_MEMORY_OVERCOMMIT")},
		&cli.FloatFlag{Name: "vcpu-overcommit", Usage: "how many vCPUs per host CPU its sandboxes may be promised (0: hostd's default, " +
			num(sandbox.DefaultVCPUOvercommit) + ")", Sources: cli.EnvVars("AGENTBOX_VCPU_OVERCOMMIT")},
		&cli.IntFlag{Name: "memory-reserve-mib", Usage: "host memory (MiB) a new sandbox must leave available (0: hostd's default, " +
			num(sandbox.DefaultMemoryReserveMiB) + ")", Sources: cli.EnvVars("AGENTBOX_MEMORY_RESERVE_MIB")},
		&cli.StringSliceFlag{Name: "insecure-registry", Usage: "allow plain HTTP to this registry `HOST:PORT` for image templates (loopback always may; repeatable)"},
		&cli.StringSliceFlag{Name: "image-import-dir", Usage: "let API callers build templates from OCI layouts and tarballs under this `DIR` (repeatable)"},
		&cli.StringFlag{Name: "registry-auth-file", Usage: "Docker config `FILE` with registry credentials for image templates"},
		&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error", Sources: cli.EnvVars("AGENTBOX_LOG_LEVEL")},
		&cli.BoolFlag{Name: "drain-on-exit", Usage: "delete every sandbox when hostd stops (by default running sandboxes run on and the next hostd re-adopts them)",
			Sources: cli.EnvVars("AGENTBOX_DRAIN_ON_EXIT")},
		&cli.StringFlag{Name: "fleet-db", Usage: "run as a host of a fleet: the fleet's PostgreSQL `DSN` (postgres://...)", Sources: cli.EnvVars("AGENTBOX_FLEET_DB")},
		&cli.StringFlag{Name: "fleet-host", Usage: "this host's `NAME` in the fleet (default: the hostname)", Sources: cli.EnvVars("AGENTBOX_FLEET_HOST")},
		&cli.StringFlag{Name: "fleet-advertise", Usage: "the `URL` the fleet's control plane reaches this hostd at (default: http://<listen address>)",
			Sources: cli.EnvVars("AGENTBOX_FLEET_ADVERTISE")},
		&cli.StringFlag{Name: "fleet-secret-file", Usage: "`FILE` holding the fleet secret that host tokens derive from (AGENTBOX_FLEET_SECRET holds the secret itself)",
			Sources: cli.EnvVars("AGENTBOX_FLEET_SECRET_FILE")},
		&cli.DurationFlag{Name: "fleet-lease-ttl", Value: fleetagent.DefaultTTL, Usage: "this host's lease in the fleet; it heartbeats every third of it",
			Sources: cli.EnvVars("AGENTBOX_FLEET_LEASE_TTL")},
		&cli.IntFlag{Name: "fleet-max-sandboxes", Usage: "the most sandboxes this host holds at once, reported to the fleet (0: no cap)",
			Sources: cli.EnvVars("AGENTBOX_FLEET_MAX_SANDBOXES")},
		&cli.StringFlag{Name: "snapshot-store", Usage: "make pauses durable in, and import sandboxes from, this S3-compatible `URL` (s3://bucket/prefix?endpoint=http://host:port&region=R)",
			Sources: cli.EnvVars("AGENTBOX_SNAPSHOT_STORE")},
		&cli.StringFlag{Name: "snapshot-store-credentials", Usage: "`FILE` with the snapshot store's access and secret key (two lines, or AWS_ACCESS_KEY_ID=/AWS_SECRET_ACCESS_KEY= lines; default: those environment variables)",
			Sources: cli.EnvVars("AGENTBOX_SNAPSHOT_STORE_CREDENTIALS")},
		&cli.StringFlag{Name: "chunk-cache", Usage: "local cache `DIR` of the snapshot store's chunks (default DATA_DIR/chunks)", Sources: cli.EnvVars("AGENTBOX_CHUNK_CACHE")},
		&cli.Int64Flag{Name: "chunk-cache-bytes", Usage: "bound of the chunk cache in bytes (0: the default, 4 GiB)", Sources: cli.EnvVars("AGENTBOX_CHUNK_CACHE_BYTES")},
		&cli.DurationFlag{Name: "shutdown-timeout", Value: 10 * time.Second, Usage: "on SIGTERM, how long requests in flight may finish before they are cut",
			Sources: cli.EnvVars("AGENTBOX_SHUTDOWN_TIMEOUT")},
	}
}

// APIKeyFlag is --api-key: a key hostd accepts beside the stored ones (with
// none, the first start writes one to DATA_DIR/api-key).
func APIKeyFlag() cli.Flag {
	return &cli.StringFlag{Name: "api-key", Usage: "API key accepted beside the stored ones (unset: the key in DATA_DIR/api-key, made at the first start)",
		Sources: cli.EnvVars("AGENTBOX_API_KEY")}
}

// oneOf returns a flag validator accepting only the given values, or ""
// (hostd's default, as from an empty environment variable).
func oneOf(values ...string) func(string) error {
	return func(v string) error {
		if v != "" && !slices.Contains(values, v) {
			return fmt.Errorf("%q is not one of %v", v, values)
		}
		return nil
	}
}

// templateBuilds runs Dockerfile and blueprint builds in hostd, over its
// own API.
func templateBuilds(self func() string) api.TemplateBuilds { return &templatebuild.Builder{URL: self} }

// Config returns the hostd.Config that cmd's flags give: Flags and an
// api-key flag of its own or of an ancestor. hostd logs to logw at
// --log-level, and leaves its sandboxes running when it stops unless
// --drain-on-exit.
func Config(cmd *cli.Command, logw io.Writer) (hostd.Config, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(cmd.String("log-level"))); err != nil {
		return hostd.Config{}, fmt.Errorf("--log-level: %w", err)
	}
	cfg := hostd.Config{
		Listen:                 cmd.String("listen"),
		DataDir:                cmd.String("data-dir"),
		APIKey:                 cmd.String("api-key"),
		VMM:                    cmd.String("vmm"),
		Accel:                  cmd.String("accel"),
		TCGTBSizeMiB:           cmd.Int("tcg-tb-size"),
		Kernel:                 cmd.String("kernel"),
		Initramfs:              cmd.String("initramfs"),
		BaseImage:              cmd.String("base-image"),
		BaseSnapshots:          cmd.String("base-snapshots"),
		BasePool:               cmd.Int("base-pool"),
		Network:                cmd.String("network"),
		EgressHosts:            cmd.StringMap("egress-host"),
		EgressUpstreamCA:       cmd.String("egress-upstream-ca"),
		EgressConnsPerSandbox:  cmd.Int("egress-conns-per-sandbox"),
		ServiceConnsPerSandbox: cmd.Int("service-conns-per-sandbox"),
		MountRoots:             cmd.StringSlice("mount-root"),
		Domain:                 cmd.String("domain"),
		TLSCert:                cmd.String("tls-cert"),
		TLSKey:                 cmd.String("tls-key"),
		OTLPEndpoint:           cmd.String("otlp-endpoint"),
		Recorder:               cmd.String("recorder"),
		EventRetention:         cmd.Duration("event-retention"),
		ReapInterval:           cmd.Duration("reap-interval"),
		VMMUIDs:                cmd.String("vmm-uids"),
		VMMUser:                cmd.String("vmm-user"),
		Images: hostd.ImageConfig{InsecureRegistries: cmd.StringSlice("insecure-registry"),
			ImportDirs: cmd.StringSlice("image-import-dir"), RegistryAuthFile: cmd.String("registry-auth-file")},
		Logger:           slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: level})),
		LeaveRunning:     true,
		DrainOnExit:      cmd.Bool("drain-on-exit"),
		MemoryOvercommit: cmd.Float("memory-overcommit"), VCPUOvercommit: cmd.Float("vcpu-overcommit"),
		MemoryReserveMiB: cmd.Int("memory-reserve-mib"),
		ShutdownTimeout:  cmd.Duration("shutdown-timeout"),
		Builds:           templateBuilds,
		SnapshotStore: hostd.SnapshotStoreConfig{URL: cmd.String("snapshot-store"), CredentialsFile: cmd.String("snapshot-store-credentials"),
			CacheDir: cmd.String("chunk-cache"), CacheBytes: cmd.Int64("chunk-cache-bytes")},
	}
	if err := fleetConfig(cmd, &cfg); err != nil {
		return hostd.Config{}, err
	}
	if p := cmd.String("limits"); p != "" {
		if err := hostd.LoadLimits(p, &cfg); err != nil {
			return hostd.Config{}, err
		}
	}
	return cfg, nil
}

// fleetConfig fills cfg.Fleet from the fleet flags; the secret is
// AGENTBOX_FLEET_SECRET's value, else --fleet-secret-file's content.
func fleetConfig(cmd *cli.Command, cfg *hostd.Config) error {
	f := hostd.FleetConfig{DB: cmd.String("fleet-db"), Host: cmd.String("fleet-host"), Advertise: cmd.String("fleet-advertise"),
		LeaseTTL: cmd.Duration("fleet-lease-ttl"), MaxSandboxes: cmd.Int("fleet-max-sandboxes")}
	if f.MaxSandboxes < 0 {
		return fmt.Errorf("--fleet-max-sandboxes %d: want 0 (no cap) or more", f.MaxSandboxes)
	}
	if f.DB != "" {
		secret, err := hosttoken.Secret(os.Getenv("AGENTBOX_FLEET_SECRET"), cmd.String("fleet-secret-file"))
		if err != nil {
			return fmt.Errorf("--fleet-db needs the fleet secret (AGENTBOX_FLEET_SECRET or --fleet-secret-file): %w", err)
		}
		f.Secret = secret
	}
	cfg.Fleet = f
	return nil
}

// Action runs hostd as cmd's flags say until ctx ends, logging to the root
// command's ErrWriter: the Action of cmd/hostd and of `agentbox serve`.
func Action(ctx context.Context, cmd *cli.Command) error {
	cfg, err := Config(cmd, cmd.Root().ErrWriter)
	if err != nil {
		return err
	}
	return hostd.Run(ctx, cfg)
}

// num prints a default in a flag's usage.
func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
