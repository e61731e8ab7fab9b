package sandbox

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestResolveLimits(t *testing.T) {
	p := &limitPolicy{baseMiB: 2048, cgroups: true, opts: LimitOptions{
		Default: Limits{CPUQuota: 1, MaxPids: 256, NetBps: 1 << 20},
		Max:     Limits{CPUQuota: 2, HostMemoryMiB: 4096, MaxPids: 1024, IdleTimeoutS: 3600, NetBps: 8 << 20},
	}}
	tests := []struct {
		name    string
		in      Limits
		want    Limits
		wantErr string
	}{
		{name: "defaults", in: Limits{}, want: Limits{CPUQuota: 1, MaxPids: 256, NetBps: 1 << 20, OnTimeout: OnTimeoutDelete}},
		{name: "within", in: Limits{CPUQuota: 0.5, DiskMiB: 1024, NetBps: 4 << 20, OnTimeout: OnTimeoutPause},
			want: Limits{CPUQuota: 0.5, DiskMiB: 1024, MaxPids: 256, NetBps: 4 << 20, OnTimeout: OnTimeoutPause}},
		{name: "net over max", in: Limits{NetBps: 16 << 20}, wantErr: "net_bps 16777216 is over the maximum of 8388608"},
		{name: "net below min", in: Limits{NetBps: 1000}, wantErr: "net_bps must be at least 8192"},
		{name: "net negative", in: Limits{NetBps: -1}, wantErr: "negative"},
		{name: "disk below min", in: Limits{DiskBps: 1}, wantErr: "disk_bps must be at least 1048576"},
		{name: "disk at min", in: Limits{DiskBps: MinDiskBps},
			want: Limits{CPUQuota: 1, MaxPids: 256, NetBps: 1 << 20, DiskBps: MinDiskBps, OnTimeout: OnTimeoutDelete}},
		{name: "exec timeout over a year", in: Limits{ExecTimeoutS: 18446744074}, wantErr: "exec_timeout_s and idle_timeout_s must be at most"},
		{name: "cpu over max", in: Limits{CPUQuota: 3}, wantErr: "cpu_quota 3 is over the maximum of 2"},
		{name: "pids over max", in: Limits{MaxPids: 5000}, wantErr: "max_pids 5000 is over the maximum of 1024"},
		{name: "disk over base", in: Limits{DiskMiB: 4096}, wantErr: "disk_mib 4096 is over the maximum of 2048"},
		{name: "bad on_timeout", in: Limits{OnTimeout: "explode"}, wantErr: "on_timeout"},
		{name: "negative", in: Limits{DiskBps: -1}, wantErr: "negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := p.resolve(tc.in)
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

func TestCPUQuotaBoundedByTheHost(t *testing.T) {
	p := &limitPolicy{cgroups: true} // no configured maximum
	for _, q := range []float64{1e10, 1e308} {
		if _, err := p.resolve(Limits{CPUQuota: q}); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "over this host's") {
			t.Errorf("cpu_quota %g: got %v, want ErrInvalid naming the host's CPUs", q, err)
		}
	}
}

func TestResolveLimitsWithoutCgroups(t *testing.T) {
	p := &limitPolicy{}
	if _, err := p.resolve(Limits{CPUQuota: 0.5}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("got %v, want ErrInvalid", err)
	}
	if _, err := p.resolve(Limits{MaxPids: 64}); err != nil {
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

func TestKeyMaximums(t *testing.T) {
	m := &Manager{log: slog.New(slog.DiscardHandler), opts: Options{
		Cgroups:      fakeCgroups{},
		DefaultVCPUs: 1, DefaultMemoryMiB: 256, MaxVCPUs: 8, MaxMemoryMiB: 8192,
		Limits: LimitOptions{Max: Limits{CPUQuota: 4}},
		KeyMax: map[string]Maximums{"small": {VCPUs: 2, MemoryMiB: 1024, Limits: Limits{CPUQuota: 1, NetBps: 1 << 20}}},
	}}
	m.limits = limitPolicy{opts: m.opts.Limits, keyMaxes: m.opts.KeyMax, cgroups: true}
	tests := []struct {
		name    string
		opts    CreateOptions
		wantErr string
	}{
		{name: "within", opts: CreateOptions{Caller: "small", VCPUs: 2, MemoryMiB: 512, Limits: Limits{CPUQuota: 0.5}}},
		{name: "vcpus", opts: CreateOptions{Caller: "small", VCPUs: 4}, wantErr: `vcpus 4 is over the maximum of 2 for API key "small"`},
		{name: "memory", opts: CreateOptions{Caller: "small", MemoryMiB: 2048}, wantErr: `memory_mib 2048 is over the maximum of 1024 for API key "small"`},
		{name: "quota", opts: CreateOptions{Caller: "small", Limits: Limits{CPUQuota: 2}}, wantErr: `cpu_quota 2 is over the maximum of 1 for API key "small"`},
		{name: "net", opts: CreateOptions{Caller: "small", Limits: Limits{NetBps: 2 << 20}}, wantErr: `net_bps 2097152 is over the maximum of 1048576 for API key "small"`},
		{name: "other key keeps the global max", opts: CreateOptions{Caller: "big", VCPUs: 4, Limits: Limits{CPUQuota: 2}}},
		{name: "global max", opts: CreateOptions{Caller: "big", Limits: Limits{CPUQuota: 5}}, wantErr: "cpu_quota 5 is over the maximum of 4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := m.resolve(tc.opts)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %v, want ErrInvalid containing %q", err, tc.wantErr)
			}
		})
	}
}
