package agent

import (
	"context"
	"os"
	"time"

	"golang.org/x/sys/unix"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// errIsDir is the errno for reading or replacing a directory as a file.
const errIsDir = unix.EISDIR

// System is the System service.
type System struct {
	booted time.Time
}

var _ agentv1.SystemService = (*System)(nil)

// NewSystem returns a System service; booted is when the guest started.
func NewSystem(booted time.Time) *System { return &System{booted: booted} }

// Health reports that the agent answers, with a few facts about the guest.
func (s *System) Health(ctx context.Context, _ *agentv1.Empty) (*agentv1.HealthResponse, error) {
	host, _ := os.Hostname()
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	return &agentv1.HealthResponse{
		Hostname:     host,
		Kernel:       unix.ByteSliceToString(uts.Release[:]),
		UptimeNs:     int64(time.Since(s.booted)),
		TimeUnixNano: time.Now().UnixNano(),
	}, nil
}

// SetTime sets the guest's wall clock.
func (s *System) SetTime(ctx context.Context, req *agentv1.SetTimeRequest) (*agentv1.Empty, error) {
	tv := unix.NsecToTimeval(req.UnixNano)
	if err := unix.Settimeofday(&tv); err != nil {
		return nil, toStatus(os.NewSyscallError("settimeofday", err))
	}
	return &agentv1.Empty{}, nil
}

// Reseed mixes host entropy into the kernel RNG and credits it.
func (s *System) Reseed(ctx context.Context, req *agentv1.ReseedRequest) (*agentv1.Empty, error) {
	if len(req.Entropy) == 0 {
		return nil, toStatus(errBadArgs)
	}
	if err := addEntropy(req.Entropy); err != nil {
		return nil, toStatus(err)
	}
	return &agentv1.Empty{}, nil
}
