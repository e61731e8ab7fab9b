package agent

import (
	"context"
	"errors"
	"log/slog"
	"os/exec"
	"testing"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// cgroupSpawner stands in for a kernel with cgroup2: it records the cgroup
// descriptor of each start, fails the first, and starts the rest outside
// any cgroup (the test's directory is not one).
type cgroupSpawner struct {
	fds   []int
	fails int
}

func (s *cgroupSpawner) Spawn(cmd *exec.Cmd) (<-chan ExitStatus, error) {
	fd := -1
	if cmd.SysProcAttr.UseCgroupFD {
		fd = cmd.SysProcAttr.CgroupFD
	}
	s.fds = append(s.fds, fd)
	if s.fails > 0 {
		s.fails--
		return nil, errors.New("no such device (the cgroup was removed)")
	}
	cmd.SysProcAttr.UseCgroupFD = false
	return WaitSpawner{}.Spawn(cmd)
}

// Commands start in the exec cgroup through one descriptor held open; a
// start that fails with it is tried once more with the cgroup opened
// afresh, and later commands use the new descriptor.
func TestExecCgroupHeldOpen(t *testing.T) {
	sp := &cgroupSpawner{}
	e := NewExec(sp, slog.New(slog.DiscardHandler))
	e.cgroup.path = t.TempDir()
	run := func() {
		t.Helper()
		r, err := e.Start(context.Background(), &agentv1.StartRequest{Argv: []string{"true"}, WaitMs: 30000})
		if err != nil || !r.Output.Exited || r.Output.ExitCode != 0 {
			t.Fatalf("start: %v, %v", r, err)
		}
	}
	run()
	run()
	if len(sp.fds) != 2 || sp.fds[0] < 0 || sp.fds[1] != sp.fds[0] {
		t.Fatalf("cgroup descriptors %v, want one, held for both starts", sp.fds)
	}
	sp.fails = 1
	run()
	if len(sp.fds) != 4 || sp.fds[2] != sp.fds[0] || sp.fds[3] < 0 {
		t.Fatalf("cgroup descriptors %v, want a failed start with the held one, then a start with a fresh one", sp.fds)
	}
	run()
	if sp.fds[4] != sp.fds[3] {
		t.Errorf("cgroup descriptors %v: the fresh descriptor is not held", sp.fds)
	}

	// Without the cgroup, commands start outside any.
	none := &cgroupSpawner{}
	e = NewExec(none, slog.New(slog.DiscardHandler))
	e.cgroup.path = t.TempDir() + "/missing"
	e.spawner = none
	r, err := e.Start(context.Background(), &agentv1.StartRequest{Argv: []string{"true"}, WaitMs: 30000})
	if err != nil || !r.Output.Exited || len(none.fds) != 1 || none.fds[0] != -1 {
		t.Fatalf("no cgroup: %v, %v, descriptors %v, want a start outside any", r, err, none.fds)
	}
}
