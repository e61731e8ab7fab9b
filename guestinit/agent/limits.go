package agent

import (
	"os/exec"

	"golang.org/x/sys/unix"
)

// ExecCgroup is the guest cgroup in which user commands start, when it
// exists: hostd creates it with the sandbox's pids limit, so a command's
// process tree cannot exhaust the guest while the agent, outside it, keeps
// serving.
const ExecCgroup = "/sys/fs/cgroup/agentbox-exec"

// intoExecCgroup makes cmd start inside ExecCgroup (CLONE_INTO_CGROUP) if
// it exists. Call the returned func once cmd has started.
func intoExecCgroup(cmd *exec.Cmd) func() {
	fd, err := unix.Open(ExecCgroup, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return func() {}
	}
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = fd
	return func() { unix.Close(fd) }
}
