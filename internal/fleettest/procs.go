package fleettest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is one process the kit started (a hostd or a gateway).
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// startProc starts argv with env added, its output appended to logPath.
func startProc(argv, env []string, logPath string) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("fleettest: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so that a Ctrl-C at the terminal reaches the
	// kit (which cleans up in order) and not every child at once.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("fleettest: start %s: %w", argv[0], err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits up to grace, then SIGKILLs.
func (p *proc) stop(grace time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// kill sends SIGKILL and waits for the process.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// tail is the last n bytes of the process's log.
func (p *proc) tail(n int) string {
	b, _ := os.ReadFile(p.log)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// procInfo is what /proc says of one process.
type procInfo struct {
	pid, ppid int
	cmdline   string
}

// processes lists the machine's processes.
func processes() []procInfo {
	ents, _ := os.ReadDir("/proc")
	var out []procInfo
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 || f[0] == "Z" {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		cl, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		out = append(out, procInfo{pid: pid, ppid: ppid, cmdline: string(bytes.ReplaceAll(cl, []byte{0}, []byte{' '}))})
	}
	return out
}

// hostProcs returns the pids of host processes other than root: the
// descendants of root (0: none), and every process whose command line
// names dataDir — a VMM of that host's that outlived its hostd (and was
// re-parented) names its sandbox's files there.
func hostProcs(root int, dataDir string) []int {
	ps := processes()
	mine := map[int]bool{}
	if root > 0 {
		mine[root] = true
	}
	for changed := true; changed; {
		changed = false
		for _, p := range ps {
			if !mine[p.pid] && mine[p.ppid] {
				mine[p.pid], changed = true, true
			}
		}
	}
	for _, p := range ps {
		if strings.Contains(p.cmdline, dataDir+"/") || strings.Contains(p.cmdline, dataDir+" ") {
			mine[p.pid] = true
		}
	}
	delete(mine, root)
	delete(mine, os.Getpid())
	var out []int
	for pid := range mine {
		out = append(out, pid)
	}
	slices.Sort(out)
	return out
}

// killAll SIGKILLs pids and waits (up to 30 s) until none is left.
func killAll(pids []int) error {
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := slices.DeleteFunc(slices.Clone(pids), func(pid int) bool { return syscall.Kill(pid, 0) != nil || zombie(pid) })
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fleettest: processes %v outlived SIGKILL", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func zombie(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && len(stat) > i+2 && stat[i+2] == 'Z'
}
