package hostdflags

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/agentbox/agentbox/hostd"
	"github.com/agentbox/agentbox/hostd/fleetagent"
	"github.com/agentbox/agentbox/hostd/sandbox"
)

// parse runs a command of Flags and APIKeyFlag, as cmd/hostd's, on args and
// returns the Config they fill: its Logger left out, and the empty slices
// and maps of unset repeatable flags nil.
func parse(t *testing.T, args ...string) (hostd.Config, error) {
	t.Helper()
	var cfg hostd.Config
	cmd := &cli.Command{
		Name:  "hostd",
		Flags: append(Flags(), APIKeyFlag()),
		Action: func(_ context.Context, cmd *cli.Command) error {
			var err error
			cfg, err = Config(cmd, io.Discard)
			return err
		},
		DisableSliceFlagSeparator: true,
		Writer:                    io.Discard, ErrWriter: io.Discard,
		OnUsageError:   func(_ context.Context, _ *cli.Command, err error, _ bool) error { return err },
		ExitErrHandler: func(context.Context, *cli.Command, error) {},
	}
	err := cmd.Run(context.Background(), append([]string{"hostd"}, args...))
	cfg.Logger = nil
	for _, s := range []*[]string{&cfg.MountRoots, &cfg.Images.ImportDirs, &cfg.Images.InsecureRegistries} {
		if len(*s) == 0 {
			*s = nil
		}
	}
	if len(cfg.EgressHosts) == 0 {
		cfg.EgressHosts = nil
	}
	return cfg, err
}

// clearEnv unsets every AGENTBOX_ variable for the test.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "AGENTBOX_") {
			t.Setenv(k, "") // restored after the test
			os.Unsetenv(k)
		}
	}
}

// defaults is the Config of an empty command line.
func defaults() hostd.Config {
	return hostd.Config{
		Listen: hostd.DefaultListen, DataDir: hostd.DefaultDataDir, VMM: "auto", Accel: "auto", Network: "proxy",
		LeaveRunning: true, ShutdownTimeout: 10 * time.Second,
	}
}

func TestConfig(t *testing.T) {
	limits := filepath.Join(t.TempDir(), "limits.json")
	if err := os.WriteFile(limits, []byte(`{"default":{"disk_mib":2048},"keys":{"env":{"vcpus":4}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	with := func(f func(*hostd.Config)) hostd.Config {
		c := defaults()
		f(&c)
		return c
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want hostd.Config
	}{
		{name: "defaults", want: defaults()},
		{
			name: "every flag",
			args: []string{
				"--listen", "0.0.0.0:1", "--data-dir", "/d", "--api-key", "ab_k", "--vmm", "qemu", "--accel", "tcg",
				"--tcg-tb-size", "64", "--kernel", "/k", "--initramfs", "/i", "--base-image", "/b",
				"--base-snapshots", "off", "--base-pool", "-1", "--network", "off",
				"--egress-host", "git.test=127.0.0.1:9", "--egress-host", "x.test=127.0.0.2:9", "--egress-upstream-ca", "/ca.pem",
				"--egress-conns-per-sandbox", "100", "--service-conns-per-sandbox", "50",
				"--mount-root", "/srv/a,b", "--mount-root", "/srv/c", "--domain", "box.test",
				"--tls-cert", "/c.pem", "--tls-key", "/k.pem", "--otlp-endpoint", "otel:4318", "--recorder", "off",
				"--event-retention", "720h", "--reap-interval", "3s", "--vmm-uids", "off", "--vmm-user", "nobody",
				"--insecure-registry", "reg:5000", "--image-import-dir", "/t", "--registry-auth-file", "/auth.json",
				"--log-level", "debug", "--drain-on-exit", "--shutdown-timeout", "2s",
			},
			want: hostd.Config{
				Listen: "0.0.0.0:1", DataDir: "/d", APIKey: "ab_k", VMM: "qemu", Accel: "tcg",
				TCGTBSizeMiB: 64, Kernel: "/k", Initramfs: "/i", BaseImage: "/b",
				BaseSnapshots: "off", BasePool: -1, Network: "off",
				EgressHosts:      map[string]string{"git.test": "127.0.0.1:9", "x.test": "127.0.0.2:9"},
				EgressUpstreamCA: "/ca.pem", EgressConnsPerSandbox: 100, ServiceConnsPerSandbox: 50,
				MountRoots: []string{"/srv/a,b", "/srv/c"}, Domain: "box.test",
				TLSCert: "/c.pem", TLSKey: "/k.pem", OTLPEndpoint: "otel:4318", Recorder: "off",
				EventRetention: 720 * time.Hour, ReapInterval: 3 * time.Second, VMMUIDs: "off", VMMUser: "nobody",
				Images:       hostd.ImageConfig{InsecureRegistries: []string{"reg:5000"}, ImportDirs: []string{"/t"}, RegistryAuthFile: "/auth.json"},
				LeaveRunning: true, DrainOnExit: true, ShutdownTimeout: 2 * time.Second,
			},
		},
		{
			// ci/soak's command line for cmd/hostd, written for the flag package.
			name: "single dashes",
			args: []string{"-listen", "127.0.0.1:9", "-data-dir", "/d", "-vmm", "qemu", "-accel", "tcg", "-reap-interval", "3s", "-drain-on-exit"},
			want: with(func(c *hostd.Config) {
				c.Listen, c.DataDir, c.VMM, c.Accel, c.ReapInterval, c.DrainOnExit = "127.0.0.1:9", "/d", "qemu", "tcg", 3*time.Second, true
			}),
		},
		{
			name: "environment",
			env: map[string]string{
				"AGENTBOX_LISTEN": "127.0.0.1:9", "AGENTBOX_DATA_DIR": "/d", "AGENTBOX_API_KEY": "ab_env",
				"AGENTBOX_VMM": "cloud-hypervisor", "AGENTBOX_ACCEL": "kvm", "AGENTBOX_KERNEL": "/k",
				"AGENTBOX_INITRAMFS": "/i", "AGENTBOX_BASE_IMAGE": "/b", "AGENTBOX_BASE_SNAPSHOTS": "off",
				"AGENTBOX_NETWORK": "off", "AGENTBOX_MOUNT_ROOTS": "/srv", "AGENTBOX_DOMAIN": "box.test",
				"AGENTBOX_TLS_CERT": "/c.pem", "AGENTBOX_TLS_KEY": "/k.pem", "AGENTBOX_OTLP_ENDPOINT": "otel:4318",
				"AGENTBOX_RECORDER": "off", "AGENTBOX_EVENT_RETENTION": "1h", "AGENTBOX_REAP_INTERVAL": "5s",
				"AGENTBOX_VMM_UIDS": "10-20", "AGENTBOX_VMM_USER": "nobody", "AGENTBOX_DRAIN_ON_EXIT": "true",
				"AGENTBOX_SHUTDOWN_TIMEOUT": "1s", "AGENTBOX_LOG_LEVEL": "warn",
			},
			want: hostd.Config{
				Listen: "127.0.0.1:9", DataDir: "/d", APIKey: "ab_env", VMM: "cloud-hypervisor", Accel: "kvm",
				Kernel: "/k", Initramfs: "/i", BaseImage: "/b", BaseSnapshots: "off", Network: "off",
				MountRoots: []string{"/srv"}, Domain: "box.test", TLSCert: "/c.pem", TLSKey: "/k.pem",
				OTLPEndpoint: "otel:4318", Recorder: "off", EventRetention: time.Hour, ReapInterval: 5 * time.Second,
				VMMUIDs: "10-20", VMMUser: "nobody", LeaveRunning: true, DrainOnExit: true, ShutdownTimeout: time.Second,
			},
		},
		{
			name: "a flag over the environment",
			args: []string{"--vmm", "qemu"},
			env:  map[string]string{"AGENTBOX_VMM": "cloud-hypervisor"},
			want: with(func(c *hostd.Config) { c.VMM = "qemu" }),
		},
		{
			// As cmd/hostd took them: empty is hostd's default.
			name: "empty environment",
			env:  map[string]string{"AGENTBOX_VMM": "", "AGENTBOX_ACCEL": "", "AGENTBOX_LISTEN": ""},
			want: with(func(c *hostd.Config) { c.VMM, c.Accel, c.Listen = "", "", "" }),
		},
		{
			name: "limits",
			args: []string{"--limits", limits},
			want: with(func(c *hostd.Config) {
				c.Limits = sandbox.LimitOptions{Default: sandbox.Limits{DiskMiB: 2048}}
				c.KeyMaximums = map[string]sandbox.Maximums{"env": {VCPUs: 4}}
			}),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			got, err := parse(t, tc.args...)
			if err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			if tc.want.Fleet.LeaseTTL == 0 {
				tc.want.Fleet.LeaseTTL = fleetagent.DefaultTTL
			}
			if got.Builds == nil {
				t.Error("no template builder wired (POST /v1/templates/build would answer 501)")
			}
			got.Builds = nil // a func: compared by being set, above
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v,\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"vmm", []string{"--vmm", "kvm"}, `"kvm" is not one of`},
		{"accel", []string{"--accel", "hvf"}, `"hvf" is not one of`},
		{"network", []string{"--network", "bridge"}, `"bridge" is not one of`},
		{"log level", []string{"--log-level", "loud"}, "--log-level"},
		{"limits", []string{"--limits", filepath.Join(t.TempDir(), "none.json")}, "hostd: limits"},
		{"unknown flag", []string{"--vcpus", "2"}, "not defined: -vcpus"},
		{"duration", []string{"--reap-interval", "often"}, "often"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			_, err := parse(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got error %v, want one with %q", err, tc.want)
			}
		})
	}
}

func TestConfigLogLevel(t *testing.T) {
	clearEnv(t)
	for _, tc := range []struct {
		args  []string
		debug bool
	}{{nil, false}, {[]string{"--log-level", "debug"}, true}} {
		var logger *slog.Logger
		cmd := &cli.Command{Name: "hostd", Flags: Flags(), Action: func(_ context.Context, cmd *cli.Command) error {
			cfg, err := Config(cmd, io.Discard)
			logger = cfg.Logger
			return err
		}}
		if err := cmd.Run(context.Background(), append([]string{"hostd"}, tc.args...)); err != nil {
			t.Fatal(err)
		}
		if got := logger.Enabled(context.Background(), slog.LevelDebug); got != tc.debug {
			t.Errorf("%q: got debug %v, want %v", tc.args, got, tc.debug)
		}
	}
}

// The fleet flags, and the secret from the environment or a file.
func TestConfigFleet(t *testing.T) {
	clearEnv(t)
	t.Setenv("AGENTBOX_FLEET_DB", "postgres://db/fleet")
	t.Setenv("AGENTBOX_FLEET_SECRET", "  a secret of sixteen bytes or more \n")
	got, err := parse(t, "--fleet-host", "h1", "--fleet-advertise", "http://10.0.0.1:7070", "--fleet-lease-ttl", "4s", "--fleet-max-sandboxes", "12")
	if err != nil {
		t.Fatal(err)
	}
	want := hostd.FleetConfig{DB: "postgres://db/fleet", Host: "h1", Advertise: "http://10.0.0.1:7070",
		Secret: []byte("a secret of sixteen bytes or more"), LeaseTTL: 4 * time.Second, MaxSandboxes: 12}
	if !reflect.DeepEqual(got.Fleet, want) {
		t.Fatalf("got %+v, want %+v", got.Fleet, want)
	}
	os.Unsetenv("AGENTBOX_FLEET_SECRET")
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte("another secret of the fleet\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err = parse(t, "--fleet-secret-file", file)
	if err != nil || string(got.Fleet.Secret) != "another secret of the fleet" || got.Fleet.LeaseTTL != fleetagent.DefaultTTL {
		t.Fatalf("secret file: %+v %v", got.Fleet, err)
	}
	if _, err := parse(t); err == nil || !strings.Contains(err.Error(), "fleet secret") {
		t.Fatalf("no secret: %v", err)
	}
}
