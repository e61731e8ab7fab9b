package vmm

import (
	"fmt"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// The VMM process lifetime policy, for every backend: a VMM dies with the
// hostd that started it. StartProcess is the one place that decides it.
//
// Each VMM process is started from one OS thread that never exits, with
// Pdeathsig SIGKILL: the kernel kills the VMM when that thread (so, hostd)
// dies, however hostd dies, and no other thread's exit (a goroutine that
// locked its thread for setns, say) can kill a VMM by accident. The VMM is
// in a process group of its own, so a signal to hostd's group or terminal
// (^C) does not reach it: only Stop, or hostd's death, ends it.
//
// A hostd that starts again therefore finds no VM of its predecessor
// running; it marks their sandboxes failed (hostd/sandbox.Recover). To let
// VMMs outlive hostd, change StartProcess (and Recover, which would then
// adopt them).
var (
	spawnReqs = make(chan spawnReq)
	spawnOnce sync.Once
)

// spawnReq is a process to start on the spawner thread.
type spawnReq struct {
	cmd *exec.Cmd
	err chan error
}

// spawner starts every VMM process from one locked OS thread.
func spawner() {
	runtime.LockOSThread()
	for r := range spawnReqs {
		r.err <- r.cmd.Start()
	}
}

// StartProcess starts cmd, a VMM process, under the lifetime policy above.
// It sets cmd.SysProcAttr's Pdeathsig and Setpgid (keeping its other
// fields; Setsid is refused, it would defeat the policy's process group).
func StartProcess(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if cmd.SysProcAttr.Setsid {
		return fmt.Errorf("vmm: start %s: Setsid is not the VMM lifetime policy", cmd.Path)
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	cmd.SysProcAttr.Setpgid = true
	spawnOnce.Do(func() { go spawner() })
	r := spawnReq{cmd: cmd, err: make(chan error, 1)}
	spawnReqs <- r
	return <-r.err
}
