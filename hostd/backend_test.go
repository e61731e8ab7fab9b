package hostd

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmm"
)

func TestChooseDriverErrors(t *testing.T) {
	t.Setenv("AGENTBOX_CH_BIN", "/nonexistent/cloud-hypervisor")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	tests := []struct {
		name string
		cfg  Config
		want error
	}{
		{"cloud-hypervisor missing", Config{VMM: "cloud-hypervisor", Logger: log}, vmm.ErrBinaryNotFound},
		{"unknown vmm", Config{VMM: "firecracker", Logger: log}, nil},
		{"unknown accel", Config{VMM: "qemu", Accel: "hvf", Logger: log}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start := time.Now()
			_, _, err := chooseDriver(ctx, tc.cfg)
			if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("got %v, want an error wrapping %v", err, tc.want)
			}
			t.Logf("failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
		})
	}
	d, h, err := chooseDriver(context.Background(), Config{VMM: "qemu", Accel: "tcg", Logger: log})
	if err != nil || d.Name() != "qemu" || h.Accel != "tcg" {
		t.Errorf("qemu with tcg: got %v %+v %v", d, h, err)
	}
}
