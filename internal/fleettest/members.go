package fleettest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/hostd/cgroup"
	"github.com/agentbox/agentbox/hostd/netns"
)

// hostArgv is host i's command line: hostd run in its namespace by
// nsenter (which execs it: the pid is hostd's), on its address and data
// directory, draining its sandboxes when it is stopped (Close).
func (f *Fleet) hostArgv(i int) []string {
	argv := []string{"nsenter", "--net=/run/netns/" + f.net.netns(i), "--", filepath.Join(f.bin, "hostd"),
		"--listen", fmt.Sprintf("%s:%d", f.net.hostIP(i), HostPort), "--data-dir", f.HostDataDir(i),
		"--api-key", f.hostKey, "--base-pool", "-1", "--drain-on-exit", "--log-level", "debug"}
	if f.o.Fleet {
		argv = append(argv, "--fleet-db", f.HostDSN(), "--fleet-host", f.HostName(i), "--fleet-advertise", f.HostURL(i),
			"--fleet-secret-file", f.secretFile, "--fleet-lease-ttl", f.o.LeaseTTL.String())
		if f.o.MaxSandboxes > 0 {
			argv = append(argv, "--fleet-max-sandboxes", strconv.Itoa(f.o.MaxSandboxes))
		}
	}
	if f.bucket != nil {
		argv = append(argv, "--snapshot-store", f.StoreURL())
	}
	return append(argv, f.o.HostArgs...)
}

// StartHost starts host i's hostd (again, after KillHost: the same data
// directory, address and name) and waits until its API answers.
func (f *Fleet) StartHost(ctx context.Context, i int) error {
	if f.HostPID(i) != 0 {
		return fmt.Errorf("fleettest: host %d is running", i)
	}
	p, err := startProc(f.hostArgv(i), f.storeEnv(), f.HostLog(i))
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.hosts[i] = p
	f.started = append(f.started, p.pid())
	f.mu.Unlock()
	f.o.Logf("fleettest: host %d (%s) pid %d at %s", i, f.HostName(i), p.pid(), f.HostURL(i))
	return waitHTTP(ctx, f.HostURL(i)+"/healthz", p, "hostd "+strconv.Itoa(i))
}

// KillHost kills host i as a crash would: hostd is stopped (SIGSTOP, so
// it starts nothing more), its VMMs found, and all of them SIGKILLed. It
// returns once none of them is left; the host's data stays for StartHost.
func (f *Fleet) KillHost(i int) error {
	f.mu.Lock()
	p := f.hosts[i]
	f.hosts[i] = nil
	f.mu.Unlock()
	root := 0
	if p != nil && !p.exited() {
		root = p.pid()
		_ = syscall.Kill(root, syscall.SIGSTOP)
	}
	vmms := hostProcs(root, f.HostDataDir(i))
	f.record(vmms...)
	if p != nil {
		p.kill()
	}
	err := killAll(vmms)
	f.o.Logf("fleettest: killed host %d (hostd pid %d, vmm pids %v)", i, root, vmms)
	return err
}

// stopHost stops host i's hostd gracefully (it drains its sandboxes),
// kills whatever is left and removes what a killed hostd leaves behind:
// its sandboxes' namespaces and its cgroups.
func (f *Fleet) stopHost(i int) error {
	f.mu.Lock()
	p := f.hosts[i]
	f.hosts[i] = nil
	f.mu.Unlock()
	if p != nil && !p.exited() {
		p.stop(60 * time.Second)
	}
	vmms := hostProcs(0, f.HostDataDir(i))
	f.record(vmms...)
	return errors.Join(killAll(vmms), removeHostLeftovers(f.HostDataDir(i)))
}

// removeHostLeftovers removes the sandbox namespaces and cgroups of the
// hostd on dataDir, once nothing of it runs.
func removeHostLeftovers(dataDir string) error {
	var errs []error
	prefix := netns.InstallationOf(dataDir).Name("")
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			errs = append(errs, netns.Remove(e.Name()))
		}
	}
	if cg, err := cgroup.New(instanceName(dataDir)); err == nil {
		ids, _ := cg.List()
		for _, id := range ids {
			errs = append(errs, cg.Remove(id))
		}
		errs = append(errs, cg.Close())
	}
	return errors.Join(errs...)
}

// instanceName is hostd's cgroup instance for dataDir, derived as hostd
// derives it (hostd/resources.go instanceName) when Config.Instance is
// unset.
func instanceName(dataDir string) string {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		abs = dataDir
	}
	sum := sha256.Sum256([]byte(abs))
	return "i-" + hex.EncodeToString(sum[:6])
}

// gatewayArgv is replica j's command line.
func (f *Fleet) gatewayArgv(j int) []string {
	argv := []string{filepath.Join(f.bin, "agentbox"), "gateway", "--listen", fmt.Sprintf("127.0.0.1:%d", f.gwPorts[j]),
		"--fleet-db", f.DSN(), "--fleet-secret-file", f.secretFile, "--lease-ttl", f.o.LeaseTTL.String(),
		"--admin-key-file", f.adminKeyFile}
	if f.bucket != nil {
		argv = append(argv, "--snapshot-store", f.StoreURL())
	}
	return append(argv, f.o.GatewayArgs...)
}

// StartGateway starts replica j (again, after KillGateway: the same port)
// and waits until it is ready (/readyz).
func (f *Fleet) StartGateway(ctx context.Context, j int) error {
	if f.GatewayPID(j) != 0 {
		return fmt.Errorf("fleettest: gateway %d is running", j)
	}
	p, err := startProc(f.gatewayArgv(j), append([]string{"AGENTBOX_API_KEY=" + f.adminKey}, f.storeEnv()...), f.GatewayLog(j))
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.gateways[j] = p
	f.started = append(f.started, p.pid())
	f.mu.Unlock()
	f.o.Logf("fleettest: gateway %d pid %d at %s", j, p.pid(), f.GatewayURL(j))
	return waitHTTP(ctx, f.GatewayURL(j)+"/readyz", p, "gateway "+strconv.Itoa(j))
}

// KillGateway kills replica j with SIGKILL.
func (f *Fleet) KillGateway(j int) error {
	f.mu.Lock()
	p := f.gateways[j]
	f.gateways[j] = nil
	f.mu.Unlock()
	if p != nil {
		p.kill()
	}
	return nil
}

// Close stops everything the fleet started, by pid: the gateways, the
// hostds with their VMMs, PostgreSQL; then removes the namespaces, links,
// bridge and (if Start made it) the directory. It is safe to call twice.
func (f *Fleet) Close() error {
	var errs []error
	for j := range f.gateways {
		f.mu.Lock()
		p := f.gateways[j]
		f.gateways[j] = nil
		f.mu.Unlock()
		if p != nil && !p.exited() {
			p.stop(10 * time.Second)
		}
	}
	for i := range f.hosts {
		errs = append(errs, f.stopHost(i))
	}
	if f.pg != nil {
		f.pg.Remove()
	}
	f.bucket.close()
	f.bucket = nil
	if f.net != nil && !f.netRemoved {
		errs = append(errs, f.net.remove(context.Background(), f.netHosts))
		f.netRemoved = true
	}
	if f.tempDir {
		errs = append(errs, os.RemoveAll(f.dir))
		f.tempDir = false
	}
	return errors.Join(errs...)
}

// logTails writes the end of every member's log.
func (f *Fleet) logTails(logf func(string, ...any)) {
	for i := range f.hosts {
		b, _ := os.ReadFile(f.HostLog(i))
		logf("hostd %d log (end):\n%s", i, tailBytes(b, 4000))
	}
	for j := range f.gateways {
		b, _ := os.ReadFile(f.GatewayLog(j))
		logf("gateway %d log (end):\n%s", j, tailBytes(b, 4000))
	}
}

func tailBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
