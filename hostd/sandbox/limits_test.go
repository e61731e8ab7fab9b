package sandbox

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestResolveLimits(t *testing.T) {
	m := &Manager{log: slog.New(slog.DiscardHandler), baseMiB: 2048, opts: Options{
		Cgroups: fakeCgroups{},
		Limits: LimitOptions{
			Default: Limits{CPUQuota: 1, MaxPids: 256},
			Max:     Limits{CPUQuota: 2, HostMemoryMiB: 4096, MaxPids: 1024, IdleTimeoutS: 3600},
		},
	}}
	tests := []struct {
		name    string
		in      Limits
		want    Limits
		wantErr string
	}{
		{name: "defaults", in: Limits{}, want: Limits{CPUQuota: 1, MaxPids: 256, OnTimeout: OnTimeoutDelete}},
		{name: "within", in: Limits{CPUQuota: 0.5, DiskMiB: 1024, OnTimeout: OnTimeoutPause},
			want: Limits{CPUQuota: 0.5, DiskMiB: 1024, MaxPids: 256, OnTimeout: OnTimeoutPause}},
		{name: "cpu over max", in: Limits{CPUQuota: 3}, wantErr: "cpu_quota 3 is over the maximum of 2"},
		{name: "pids over max", in: Limits{MaxPids: 5000}, wantErr: "max_pids 5000 is over the maximum of 1024"},
		{name: "disk over base", in: Limits{DiskMiB: 4096}, wantErr: "disk_mib 4096 is over the maximum of 2048"},
		{name: "bad on_timeout", in: Limits{OnTimeout: "explode"}, wantErr: "on_timeout"},
		{name: "negative", in: Limits{DiskBps: -1}, wantErr: "negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := m.resolveLimits(tc.in)
			if tc.wantErr != "" {
				if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want ErrInvalid containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v, want %+v", got, err, tc.want)
			}
		})
	}
}

func TestResolveLimitsWithoutCgroups(t *testing.T) {
	m := &Manager{log: slog.New(slog.DiscardHandler)}
	if _, err := m.resolveLimits(Limits{CPUQuota: 0.5}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("got %v, want ErrInvalid", err)
	}
	if _, err := m.resolveLimits(Limits{MaxPids: 64}); err != nil {
		t.Fatalf("got %v, want nil", err)
	}
}

func TestCheckHostMemory(t *testing.T) {
	if err := checkHostMemory(Limits{HostMemoryMiB: 300}, 256); err == nil {
		t.Fatal("got nil, want an error for a cap below memory_mib + 64")
	}
	if err := checkHostMemory(Limits{HostMemoryMiB: 400}, 256); err != nil {
		t.Fatalf("got %v, want nil", err)
	}
}
