package agent

import (
	"os/exec"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// ExecCgroup is the guest cgroup in which user commands start, when it
// exists: hostd creates it with the sandbox's pids limit, so a command's
// process tree cannot exhaust the guest while the agent, outside it, keeps
// serving.
const ExecCgroup = "/sys/fs/cgroup/agentbox-exec"

// cgroupDir holds ExecCgroup open (O_PATH) for CLONE_INTO_CGROUP. Opening
// it for each command was a path walk through cgroupfs and a close per
// exec, guest CPU that under TCG is a few hundred µs.
type cgroupDir struct {
	path string
	// mu is held for reading while a command starts with fd, and for
	// writing to open or replace it: fd is never closed under a clone.
	mu sync.RWMutex
	fd int  // the open descriptor, when ok
	ok bool // fd is open
}

// rlock returns the open descriptor (or -1 when the cgroup does not exist)
// with mu held for reading; call runlock after the start.
func (c *cgroupDir) rlock() int {
	c.mu.RLock()
	if c.ok {
		return c.fd
	}
	c.mu.RUnlock()
	c.mu.Lock()
	if !c.ok {
		c.open()
	}
	c.mu.Unlock()
	c.mu.RLock()
	if !c.ok {
		return -1
	}
	return c.fd
}

func (c *cgroupDir) runlock() { c.mu.RUnlock() }

// open opens path; call with mu held for writing. A cgroup that does not
// exist yet is looked for again at the next command.
func (c *cgroupDir) open() {
	fd, err := unix.Open(c.path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	c.fd, c.ok = fd, err == nil
}

// reopen replaces fd, a descriptor a command failed to start with: the
// cgroup may have been removed (and made again) since it was opened.
func (c *cgroupDir) reopen(fd int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ok && c.fd == fd {
		unix.Close(fd)
		c.open()
	}
}

// spawnInCgroup starts cmd with sp inside e's exec cgroup, if it exists. A
// start that fails with the held descriptor is tried once more with the
// cgroup opened afresh, on a copy of cmd (a Cmd starts once).
func (e *Exec) spawnInCgroup(cmd *exec.Cmd) (*exec.Cmd, <-chan ExitStatus, error) {
	exit, fd, err := e.spawnWith(cmd)
	if err == nil || fd < 0 {
		return cmd, exit, err
	}
	e.cgroup.reopen(fd)
	retry := &exec.Cmd{Path: cmd.Path, Args: cmd.Args, Env: cmd.Env, Dir: cmd.Dir,
		Stdin: cmd.Stdin, Stdout: cmd.Stdout, Stderr: cmd.Stderr, ExtraFiles: cmd.ExtraFiles}
	attr := *cmd.SysProcAttr
	retry.SysProcAttr = &attr
	exit, _, err = e.spawnWith(retry)
	return retry, exit, err
}

// spawnWith starts cmd in the cgroup held now; fd is the descriptor it
// used, or -1.
func (e *Exec) spawnWith(cmd *exec.Cmd) (<-chan ExitStatus, int, error) {
	fd := e.cgroup.rlock()
	defer e.cgroup.runlock()
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = fd >= 0, max(fd, 0)
	exit, err := e.spawner.Spawn(cmd)
	return exit, fd, err
}
