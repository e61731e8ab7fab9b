// Package hostdtest runs a real hostd (QEMU, TCG) in-process for tests: the
// one helper that hostd's end-to-end tests and the SDK suites share.
package hostdtest

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd"
	"github.com/agentbox/agentbox/hostd/api"
	"github.com/agentbox/agentbox/internal/templatebuild"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// Key is the API key the test hostd accepts.
const Key = "ab_test-key-for-e2e"

// Hostd is a running test hostd.
type Hostd struct {
	// URL is its API address (http://127.0.0.1:PORT).
	URL string
	// Key is the API key it accepts.
	Key string
	// Client is a client of it.
	Client *client.Client
	// Log is the path of its log file (in the data dir).
	Log string
	// Stop ends it (once); it is safe to call more than once.
	Stop func()
}

// Start runs hostd on data dir data with the guest assets vmmtest finds,
// after applying tweaks to its config. Stop prints hostd's log if t failed.
func Start(t testing.TB, data string, tweaks ...func(*hostd.Config)) *Hostd {
	t.Helper()
	a := vmmtest.FindAssets(t)
	logf, err := os.OpenFile(filepath.Join(data, "hostd.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cfg := hostd.Config{
		Listen: "127.0.0.1:0", DataDir: data, APIKey: Key, VMM: "qemu", Accel: "tcg",
		Kernel: a.Kernel, Initramfs: a.Initramfs, BaseImage: a.BaseImage,
		Logger: slog.New(slog.NewTextHandler(logf, &slog.HandlerOptions{Level: slog.LevelDebug})),
		// Base snapshots stay on (a test hostd's first create boots and is
		// captured, the rest restore), but no warm pool: a paused VM per
		// test hostd that most tests never claim is CPU and memory the
		// other tests need. A tweak turns it on.
		// AGENTBOX_BASE_SNAPSHOTS=off boots every sandbox (to compare).
		BasePool: -1, BaseSnapshots: os.Getenv("AGENTBOX_BASE_SNAPSHOTS"),
		Builds: func(self func() string) api.TemplateBuilds { return &templatebuild.Builder{URL: self} },
	}
	for _, tw := range tweaks {
		tw(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- hostd.RunWithReady(ctx, cfg, func(a string) { addr <- a }) }()
	var url string
	select {
	case a := <-addr:
		url = "http://" + a
	case err := <-done:
		cancel()
		logf.Close()
		t.Fatalf("hostd: %v", err)
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("hostd: %v", err)
			}
			if t.Failed() {
				b, _ := os.ReadFile(logf.Name())
				t.Logf("hostd log:\n%s", b)
			}
			logf.Close()
		})
	}
	c, err := client.New(url, cfg.APIKey)
	if err != nil {
		stop()
		t.Fatal(err)
	}
	return &Hostd{URL: url, Key: cfg.APIKey, Client: c, Log: logf.Name(), Stop: stop}
}
