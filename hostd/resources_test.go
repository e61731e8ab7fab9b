package hostd

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLoadLimits(t *testing.T) {
	p := filepath.Join(t.TempDir(), "limits.json")
	doc := `{"default": {"cpu_quota": 1, "max_pids": 512},
	 "max": {"cpu_quota": 2},
	 "keys": {"team-a": {"vcpus": 2, "limits": {"cpu_quota": 0.5}}}}`
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	var cfg Config
	if err := LoadLimits(p, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Limits.Default.CPUQuota != 1 || cfg.Limits.Default.MaxPids != 512 || cfg.Limits.Max.CPUQuota != 2 {
		t.Errorf("got %+v, want the file's defaults and maximums", cfg.Limits)
	}
	if k := cfg.KeyMaximums["team-a"]; k.VCPUs != 2 || k.Limits.CPUQuota != 0.5 {
		t.Errorf("got %+v for team-a", k)
	}
	if err := os.WriteFile(p, []byte(`{"defaults": {}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := LoadLimits(p, &cfg); err == nil {
		t.Error("got nil for an unknown field, want an error")
	}
}
