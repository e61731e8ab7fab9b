// Command hostd runs the agentbox daemon (the same as `agentbox serve`).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentbox/agentbox/hostd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "hostd:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("hostd", flag.ContinueOnError)
	cfg := hostd.Config{Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))}
	fs.StringVar(&cfg.Listen, "listen", os.Getenv("AGENTBOX_LISTEN"), "API address (default "+hostd.DefaultListen+")")
	fs.StringVar(&cfg.DataDir, "data-dir", os.Getenv("AGENTBOX_DATA_DIR"), "data directory (default "+hostd.DefaultDataDir+")")
	fs.StringVar(&cfg.VMM, "vmm", os.Getenv("AGENTBOX_VMM"), "auto, qemu or cloud-hypervisor")
	fs.StringVar(&cfg.Accel, "accel", os.Getenv("AGENTBOX_ACCEL"), "auto, kvm or tcg")
	fs.IntVar(&cfg.TCGTBSizeMiB, "tcg-tb-size", 0, "TCG translation cache per VM in MiB (0: QEMU's default)")
	fs.StringVar(&cfg.Kernel, "kernel", "", "guest kernel (PVH vmlinux)")
	fs.StringVar(&cfg.Initramfs, "initramfs", "", "guest initramfs")
	fs.StringVar(&cfg.BaseImage, "base-image", "", "base root filesystem (qcow2)")
	fs.StringVar(&cfg.Domain, "domain", os.Getenv("AGENTBOX_DOMAIN"), "host-based service URLs at {port}-{sandbox}.DOMAIN")
	fs.StringVar(&cfg.Recorder, "recorder", os.Getenv("AGENTBOX_RECORDER"), "the flight recorder: on (default) or off")
	fs.StringVar(&cfg.BaseSnapshots, "base-snapshots", os.Getenv("AGENTBOX_BASE_SNAPSHOTS"), "creates without a template restore a snapshot of the booted base image: on (default) or off")
	fs.IntVar(&cfg.BasePool, "base-pool", 0, "warm sandboxes of the base snapshot kept for creates to claim (default 1; -1: none)")
	fs.DurationVar(&cfg.ReapInterval, "reap-interval", 0, "how often the reaper looks for orphaned VMMs, cgroups and sandbox directories (default 1m)")
	fs.DurationVar(&cfg.EventRetention, "event-retention", 0, "drop flight-recorder events older than this (e.g. 720h; 0 keeps them)")
	fs.StringVar(&cfg.OTLPEndpoint, "otlp-endpoint", os.Getenv("AGENTBOX_OTLP_ENDPOINT"), "send trace spans over OTLP/HTTP to this host:port or URL (off when empty)")
	fs.StringVar(&cfg.TLSCert, "tls-cert", os.Getenv("AGENTBOX_TLS_CERT"), "serve HTTPS (and HTTP/2) with this certificate")
	fs.StringVar(&cfg.TLSKey, "tls-key", os.Getenv("AGENTBOX_TLS_KEY"), "the key of -tls-cert")
	fs.StringVar(&cfg.VMMUIDs, "vmm-uids", os.Getenv("AGENTBOX_VMM_UIDS"), "FIRST-LAST uids from which each sandbox's QEMU gets its own to drop to (default "+hostd.DefaultVMMUIDs+"; off: root)")
	fs.StringVar(&cfg.VMMUser, "vmm-user", os.Getenv("AGENTBOX_VMM_USER"), "one unprivileged user every QEMU drops to instead (root: no drop)")
	fs.BoolVar(&cfg.DrainOnExit, "drain-on-exit", false, "delete every sandbox when hostd stops (by default they run on for the next hostd)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg.LeaveRunning = true
	cfg.APIKey = os.Getenv("AGENTBOX_API_KEY")
	return hostd.Run(ctx, cfg)
}
