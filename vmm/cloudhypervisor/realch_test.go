package cloudhypervisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmm"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// TestConformanceRealCloudHypervisor runs the shared driver suite against a
// real cloud-hypervisor: the one in $AGENTBOX_CH_BIN or on $PATH, on a host
// where it boots a guest under KVM. Elsewhere it skips and says why.
func TestConformanceRealCloudHypervisor(t *testing.T) {
	bin, err := Available()
	if err != nil {
		t.Skipf("real cloud-hypervisor not testable here: %v", err)
	}
	a := vmmtest.FindAssets(t)
	if err := ProbeKVM(context.Background(), bin, a.Kernel, a.Initramfs); err != nil {
		t.Skipf("real cloud-hypervisor not testable here: KVM probe with %s: %v", bin, err)
	}
	vmmtest.Run(t, func(t *testing.T) vmm.Driver {
		d, err := New(Options{Binary: bin, DataDirs: []string{os.TempDir(), vmmtest.CacheDir()}, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}

func TestProbeKVM(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(envFake, "1")
	t.Setenv(envFakeLog, filepath.Join(t.TempDir(), "log"))
	t.Setenv("GORACE", "atexit_sleep_ms=0")
	t.Setenv(envFakeMode, "probe-ok")
	if err := ProbeKVM(context.Background(), exe, "/k", "/i"); err != nil {
		t.Errorf("a guest that prints the marker: got %v", err)
	}
	t.Setenv(envFakeMode, "")
	if err := ProbeKVM(context.Background(), exe, "/k", "/i"); !errors.Is(err, ErrKVMUnusable) || !strings.Contains(err.Error(), "KVM internal error") {
		t.Errorf("a VMM that fails: got %v, want ErrKVMUnusable with its stderr", err)
	}
	t.Setenv(EnvBinary, "")
	t.Setenv("PATH", t.TempDir())
	if err := ProbeKVM(context.Background(), "", "/k", "/i"); !errors.Is(err, vmm.ErrBinaryNotFound) {
		t.Errorf("without a binary: got %v, want vmm.ErrBinaryNotFound", err)
	}
}
