// Package serve is `agentbox serve`: it runs hostd in the foreground until
// SIGINT or SIGTERM. Then it stops accepting requests, lets those in
// flight finish within --shutdown-timeout and cuts the rest, and leaves the
// running sandboxes running for the next hostd (--drain-on-exit deletes
// them instead).
package serve

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/agentbox/agentbox/hostd"
)

// oneOf returns a flag validator accepting only the given values.
func oneOf(values ...string) func(string) error {
	return func(v string) error {
		if !slices.Contains(values, v) {
			return fmt.Errorf("%q is not one of %v", v, values)
		}
		return nil
	}
}

// Command returns the serve command. Its API key is the global --api-key
// (AGENTBOX_API_KEY), accepted in addition to the stored keys.
func Command() *cli.Command {
	cache := hostd.CacheDir()
	return &cli.Command{
		Name:  "serve",
		Usage: "run hostd, the agentbox daemon, in the foreground",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Value: hostd.DefaultListen, Usage: "API address", Sources: cli.EnvVars("AGENTBOX_LISTEN")},
			&cli.StringFlag{Name: "data-dir", Value: hostd.DefaultDataDir, Usage: "state directory (agentbox.db, api-key, sandboxes/)", Sources: cli.EnvVars("AGENTBOX_DATA_DIR")},
			&cli.StringFlag{Name: "vmm", Value: "auto", Usage: "VMM backend: auto, qemu or cloud-hypervisor", Sources: cli.EnvVars("AGENTBOX_VMM"),
				Validator: oneOf("auto", "qemu", "cloud-hypervisor")},
			&cli.StringFlag{Name: "accel", Value: "auto", Usage: "accelerator: auto (probe), kvm or tcg", Sources: cli.EnvVars("AGENTBOX_ACCEL"),
				Validator: oneOf("auto", "kvm", "tcg")},
			&cli.StringFlag{Name: "kernel", Usage: "guest kernel (default " + filepath.Join(cache, "kernel", "vmlinux") + ")", Sources: cli.EnvVars("AGENTBOX_KERNEL")},
			&cli.StringFlag{Name: "initramfs", Usage: "guest initramfs (default " + filepath.Join(cache, "initramfs.cpio") + ")", Sources: cli.EnvVars("AGENTBOX_INITRAMFS")},
			&cli.StringFlag{Name: "base-image", Usage: "base root image (default " + filepath.Join(cache, "images", "base.qcow2") + ")", Sources: cli.EnvVars("AGENTBOX_BASE_IMAGE")},
			&cli.StringFlag{Name: "domain", Usage: "serve host-based service URLs at {port}-{sandbox}.DOMAIN (wildcard DNS to this host)", Sources: cli.EnvVars("AGENTBOX_DOMAIN")},
			&cli.StringFlag{Name: "recorder", Usage: "the flight recorder: on (default) or off", Sources: cli.EnvVars("AGENTBOX_RECORDER")},
			&cli.DurationFlag{Name: "event-retention", Usage: "drop flight-recorder events older than this (e.g. 720h; 0 keeps them)", Sources: cli.EnvVars("AGENTBOX_EVENT_RETENTION")},
			&cli.StringFlag{Name: "otlp-endpoint", Usage: "send trace spans over OTLP/HTTP to this host:port or URL (off when empty)", Sources: cli.EnvVars("AGENTBOX_OTLP_ENDPOINT")},
			&cli.StringFlag{Name: "tls-cert", Usage: "serve HTTPS (and HTTP/2) with this certificate (PEM)", Sources: cli.EnvVars("AGENTBOX_TLS_CERT")},
			&cli.StringFlag{Name: "tls-key", Usage: "the key of --tls-cert (PEM)", Sources: cli.EnvVars("AGENTBOX_TLS_KEY")},
			&cli.StringFlag{Name: "vmm-uids", Usage: "`FIRST-LAST` uids (and gids) from which each sandbox's QEMU gets its own to drop to after opening its files (default " + hostd.DefaultVMMUIDs + "; off: QEMU runs as root)", Sources: cli.EnvVars("AGENTBOX_VMM_UIDS")},
			&cli.StringFlag{Name: "vmm-user", Usage: "one unprivileged `USER` every QEMU drops to instead of a uid per sandbox (e.g. nobody; root: no drop)", Sources: cli.EnvVars("AGENTBOX_VMM_USER")},
			&cli.StringFlag{Name: "limits", Usage: "JSON file of default and maximum sandbox limits, and per-API-key maximums", Sources: cli.EnvVars("AGENTBOX_LIMITS")},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error", Sources: cli.EnvVars("AGENTBOX_LOG_LEVEL")},
			&cli.StringFlag{Name: "network", Value: "proxy", Usage: "sandbox networking: proxy (a NIC behind the egress proxy) or off (no NICs)",
				Sources: cli.EnvVars("AGENTBOX_NETWORK"), Validator: oneOf("proxy", "off")},
			&cli.StringMapFlag{Name: "egress-host", Usage: "resolve an upstream `NAME=ADDRESS` for the egress proxy before the host's resolver (repeatable)"},
			&cli.StringSliceFlag{Name: "mount-root", Usage: "allow sandboxes' host mounts under this host `DIR` (repeatable; none: no host mounts)", Sources: cli.EnvVars("AGENTBOX_MOUNT_ROOTS")},
			&cli.StringFlag{Name: "egress-upstream-ca", Usage: "PEM `FILE` of extra roots the egress proxy trusts for upstream TLS"},
			&cli.StringSliceFlag{Name: "insecure-registry", Usage: "allow plain HTTP to this registry `HOST:PORT` for image templates (loopback always may; repeatable)"},
			&cli.StringSliceFlag{Name: "image-import-dir", Usage: "let API callers build templates from OCI layouts and tarballs under this `DIR` (repeatable)"},
			&cli.BoolFlag{Name: "drain-on-exit", Usage: "delete every sandbox when hostd stops (by default running sandboxes run on and the next hostd re-adopts them)",
				Sources: cli.EnvVars("AGENTBOX_DRAIN_ON_EXIT")},
			&cli.DurationFlag{Name: "shutdown-timeout", Value: 10 * time.Second, Usage: "on SIGTERM, how long requests in flight may finish before they are cut",
				Sources: cli.EnvVars("AGENTBOX_SHUTDOWN_TIMEOUT")},
			&cli.DurationFlag{Name: "reap-interval", Usage: "how often the reaper looks for orphaned VMMs, cgroups and sandbox directories (0: hostd's default, 1m)",
				Sources: cli.EnvVars("AGENTBOX_REAP_INTERVAL")},
			&cli.StringFlag{Name: "registry-auth-file", Usage: "Docker config `FILE` with registry credentials for image templates"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(cmd.String("log-level"))); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			log := slog.New(slog.NewTextHandler(cmd.Root().ErrWriter, &slog.HandlerOptions{Level: level}))
			cfg := hostd.Config{
				Listen:         cmd.String("listen"),
				DataDir:        cmd.String("data-dir"),
				APIKey:         cmd.String("api-key"),
				Kernel:         cmd.String("kernel"),
				Initramfs:      cmd.String("initramfs"),
				BaseImage:      cmd.String("base-image"),
				VMM:            cmd.String("vmm"),
				Accel:          cmd.String("accel"),
				Domain:         cmd.String("domain"),
				TLSCert:        cmd.String("tls-cert"),
				OTLPEndpoint:   cmd.String("otlp-endpoint"),
				Recorder:       cmd.String("recorder"),
				EventRetention: cmd.Duration("event-retention"),
				TLSKey:         cmd.String("tls-key"),
				Network:        cmd.String("network"),
				EgressHosts:    cmd.StringMap("egress-host"),
				Images: hostd.ImageConfig{InsecureRegistries: cmd.StringSlice("insecure-registry"),
					ImportDirs: cmd.StringSlice("image-import-dir"), RegistryAuthFile: cmd.String("registry-auth-file")},
				EgressUpstreamCA: cmd.String("egress-upstream-ca"),
				Logger:           log,
				VMMUser:          cmd.String("vmm-user"),
				VMMUIDs:          cmd.String("vmm-uids"),
				MountRoots:       cmd.StringSlice("mount-root"),
				LeaveRunning:     true,
				DrainOnExit:      cmd.Bool("drain-on-exit"),
				ShutdownTimeout:  cmd.Duration("shutdown-timeout"),
				ReapInterval:     cmd.Duration("reap-interval"),
			}
			if p := cmd.String("limits"); p != "" {
				if err := hostd.LoadLimits(p, &cfg); err != nil {
					return err
				}
			}
			return hostd.Run(ctx, cfg)
		},
	}
}
