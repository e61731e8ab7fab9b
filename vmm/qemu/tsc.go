package qemu

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// HostTSCkHz returns the host's TSC rate in kHz. Under TCG the guest's TSC
// runs at that rate, and the guest must be told (tsc_early_khz): calibrating
// it against the emulated PIT hangs about one boot in twelve.
func HostTSCkHz() (int, error) {
	if v := os.Getenv("AGENTBOX_TSC_KHZ"); v != "" {
		return strconv.Atoi(v)
	}
	if b, err := os.ReadFile("/sys/devices/system/cpu/cpu0/tsc_freq_khz"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
			return n, nil
		}
	}
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "cpu MHz" {
			mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return 0, fmt.Errorf("qemu: cpu MHz %q: %w", v, err)
			}
			return int(mhz * 1000), nil
		}
	}
	return 0, errors.New("qemu: host TSC rate not found (set AGENTBOX_TSC_KHZ)")
}
