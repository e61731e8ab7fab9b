package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
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

// SetIdentity sets the hostname and writes /etc/machine-id and /etc/hostname.
func (s *System) SetIdentity(ctx context.Context, req *agentv1.SetIdentityRequest) (*agentv1.Empty, error) {
	if req.Hostname == "" || len(req.MachineId) != 32 {
		return nil, toStatus(fmt.Errorf("%w: hostname and a 32-digit machine_id are required", errBadArgs))
	}
	if err := unix.Sethostname([]byte(req.Hostname)); err != nil {
		return nil, toStatus(os.NewSyscallError("sethostname", err))
	}
	for path, content := range map[string]string{"/etc/hostname": req.Hostname + "\n", "/etc/machine-id": req.MachineId + "\n"} {
		if err := os.WriteFile(path, []byte(content), 0o444); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, toStatus(err)
		}
	}
	return &agentv1.Empty{}, nil
}

// FIFREEZE and FITHAW from <linux/fs.h>: _IOWR('X', 119/120, int).
const (
	fiFreeze = 0xC0045877
	fiThaw   = 0xC0045878
)

// freezable lists the mount points Freeze freezes: the root filesystem.
var freezable = []string{"/"}

// Freeze flushes and freezes the writable filesystems (FIFREEZE).
func (s *System) Freeze(ctx context.Context, _ *agentv1.Empty) (*agentv1.Empty, error) {
	unix.Sync()
	for _, m := range freezable {
		if err := fsIoctl(m, fiFreeze); err != nil && !errors.Is(err, unix.EBUSY) {
			return nil, toStatus(err)
		}
	}
	return &agentv1.Empty{}, nil
}

// Thaw thaws what Freeze froze (FITHAW).
func (s *System) Thaw(ctx context.Context, _ *agentv1.Empty) (*agentv1.Empty, error) {
	for _, m := range freezable {
		if err := fsIoctl(m, fiThaw); err != nil && !errors.Is(err, unix.EINVAL) {
			return nil, toStatus(err)
		}
	}
	return &agentv1.Empty{}, nil
}

func fsIoctl(mount string, req uint) error {
	f, err := os.Open(mount)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), req, 0); err != nil {
		return &fs.PathError{Op: "ioctl", Path: mount, Err: err}
	}
	return nil
}
