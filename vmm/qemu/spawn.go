package qemu

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// spawnReq is a process to start on the spawner thread.
type spawnReq struct {
	cmd *exec.Cmd
	err chan error
}

var (
	spawnReqs = make(chan spawnReq)
	spawnOnce sync.Once
)

// spawner starts every VMM process from one OS thread that never exits.
// The processes get SIGKILL when their parent thread dies (Pdeathsig), so a
// hostd that dies, however it dies, leaves no VM running; and no other
// thread's exit (a goroutine that locked its thread for setns, say) can
// kill them by accident.
func spawner() {
	runtime.LockOSThread()
	for r := range spawnReqs {
		r.err <- r.cmd.Start()
	}
}

// spawn starts cmd on the spawner thread.
func spawn(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	cmd.SysProcAttr.Setpgid = true
	spawnOnce.Do(func() { go spawner() })
	r := spawnReq{cmd: cmd, err: make(chan error, 1)}
	spawnReqs <- r
	return <-r.err
}
