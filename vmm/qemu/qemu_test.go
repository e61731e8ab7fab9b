//go:build vm

package qemu_test

import (
	"testing"

	"github.com/agentbox/agentbox/vmm"
	"github.com/agentbox/agentbox/vmm/qemu"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

func TestConformance(t *testing.T) {
	vmmtest.Run(t, func(t *testing.T) vmm.Driver {
		d, err := qemu.New(qemu.Options{Accel: vmm.AccelTCG})
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}
