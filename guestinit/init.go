package guestinit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/containerd/ttrpc"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/agent/channel"
	"github.com/agentbox/agentbox/guestinit/agent"
	"github.com/agentbox/agentbox/guestinit/mount"
	"github.com/agentbox/agentbox/guestinit/watch"
	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// ReadyMarker is printed on the console once the agent listens.
const ReadyMarker = "AGENTBOX-READY"

// Main runs PID 1. It never returns: on a fatal error it logs and reboots,
// which ends the VM (hostd runs QEMU with -no-reboot).
func Main() {
	booted := time.Now()
	ignoreSignals() // for PID 1's whole life
	err := earlyMounts()
	console := openConsole()
	log := slog.New(slog.NewTextHandler(console, &slog.HandlerOptions{Level: slog.LevelInfo}))
	quietTTRPC(log)
	if err == nil {
		err = run(log, booted)
	}
	log.Error("guestinit failed", "err", err)
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
	select {}
}

// run boots the guest and serves the agent; it returns only on failure.
func run(log *slog.Logger, booted time.Time) error {
	ph := newPhases(booted)
	args := parseCmdline(readCmdline())
	if args["agentbox.probe"] == "1" {
		fmt.Fprintln(os.Stdout, channel.ProbeMarker)
		unix.Sync()
		return unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
	}
	loaded, skipped, err := loadModules("/lib/modules")
	if err != nil {
		return fmt.Errorf("load modules: %w", err)
	}
	log.Info("modules loaded", "count", loaded, "skipped", skipped)
	release := kernelRelease()
	ondemand, err := stageOndemand(release)
	if err != nil {
		log.Warn("on-demand modules", "err", err)
	}
	ph.done("modules")
	root := args["agentbox.root"]
	if root == "" {
		root = "/dev/vda"
	}
	if err := switchRoot(root); err != nil {
		return fmt.Errorf("switch root to %s: %w", root, err)
	}
	if err := lateMounts(); err != nil {
		return err
	}
	if ondemand {
		if err := exposeOndemand(release); err != nil {
			log.Warn("on-demand modules", "err", err)
		}
	}
	ph.done("root")
	if h := args["agentbox.hostname"]; h != "" {
		if err := unix.Sethostname([]byte(h)); err != nil {
			return fmt.Errorf("sethostname: %w", err)
		}
	}
	if err := bindIdentity(args["agentbox.hostname"]); err != nil {
		log.Warn("identity files stay on the disk", "err", err)
	}
	if err := loopbackUp(); err != nil {
		log.Warn("loopback", "err", err)
	}
	if err := setSysctls("/proc/sys"); err != nil {
		log.Warn("sysctl", "err", err)
	}
	if err := setupNetwork(args); errors.Is(err, errNoNIC) {
		log.Warn("network", "err", err)
	} else if err != nil {
		return fmt.Errorf("network: %w", err)
	}
	ph.done("net")
	reaper := NewReaper()
	if err := serveAgent(log, reaper, booted, args["agentbox.watch"] != "off"); err != nil {
		return err
	}
	ph.done("agent")
	fmt.Fprintf(os.Stdout, "%s in %v%s\n", ReadyMarker, time.Since(booted).Round(time.Millisecond), ph)
	reaper.Run(log) // never returns
	return errors.New("reaper stopped")
}

// serveAgent starts the ttrpc services on the agent port of every transport;
// with watchFiles, the file watcher too (agentbox.watch=off: hostd keeps no
// flight recorder, so the guest need not pay for one).
func serveAgent(log *slog.Logger, sp agent.Spawner, booted time.Time, watchFiles bool) error {
	srv, err := ttrpc.NewServer(agent.ServerOptions()...)
	if err != nil {
		return fmt.Errorf("ttrpc server: %w", err)
	}
	var watcher *watch.Watcher // set before the server starts; Flush is nil-safe
	ring := watch.NewRing(1)
	if watchFiles {
		ring = watch.NewRing(watch.RingSize)
	}
	exec := agent.NewExec(sp, log, agent.BeforeExit(func() { watcher.Flush() }), agent.EventsHead(ring.Head))
	files := agent.NewFiles()
	agent.Register(srv, exec, files, agent.NewSystem(booted))
	startOOMGuard(log, ring, exec)
	var events *watch.Service
	if watchFiles {
		watcher, events = startWatch(log, exec, ring)
	} else {
		events = watch.NewService(ring, "the host turned file events off (agentbox.watch=off)")
	}
	agentv1.RegisterEventsService(srv, events)
	router := NewRouter(log)
	l := router.Listen(channel.AgentPort)
	go func() {
		if err := srv.Serve(context.Background(), l); err != nil {
			log.Error("agent server stopped", "err", err)
		}
	}()
	pf := router.Listen(channel.PortForwardPort)
	go func() {
		if err := ServePortForward(pf, log); err != nil {
			log.Error("port forward stopped", "err", err)
		}
	}()
	fl := router.Listen(channel.FilesPort)
	go func() {
		if err := files.ServeStreams(fl); err != nil {
			log.Error("file streams stopped", "err", err)
		}
	}()
	ml := router.Listen(channel.MountPort)
	go func() {
		if err := mount.NewService(log).Serve(ml); err != nil {
			log.Error("mounts stopped", "err", err)
		}
	}()
	started := 0
	if dev, err := findSerialPort(SerialPortName, 3*time.Second); err == nil {
		go router.ServeSerial(dev)
		started++
		log.Info("agent channel", "transport", "virtio-serial", "device", dev)
	}
	if err := router.ServeVsock(); err == nil {
		started++
		log.Info("agent channel", "transport", "vsock")
	} else if started == 0 {
		return fmt.Errorf("no agent channel: no virtio-serial port %q, and vsock: %w", SerialPortName, err)
	}
	return nil
}

// startWatch starts the file watcher (the flight recorder) on the guest's
// writable filesystems. Without fanotify the Events service still answers,
// with the reason in watch_error.
func startWatch(log *slog.Logger, sessions watch.Sessions, ring *watch.Ring) (*watch.Watcher, *watch.Service) {
	w, err := watch.New(watch.Config{
		Paths:     watch.WritableMounts("/proc/self/mounts", watch.DefaultIgnore),
		IgnorePID: os.Getpid(),
		Sessions:  sessions,
		Log:       log,
	}, ring)
	if err != nil {
		log.Warn("file events not captured", "err", err)
		return nil, watch.NewService(ring, err.Error())
	}
	go w.Run()
	return w, watch.NewService(ring, "")
}

func readCmdline() string {
	b, _ := os.ReadFile("/proc/cmdline")
	return string(b)
}

// parseCmdline returns the key=value words of a kernel cmdline.
func parseCmdline(s string) map[string]string {
	out := map[string]string{}
	for _, w := range strings.Fields(s) {
		k, v, _ := strings.Cut(w, "=")
		out[k] = v
	}
	return out
}
