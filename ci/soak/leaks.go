package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/agentbox/agentbox/hostd/netns"
	"github.com/agentbox/agentbox/internal/leakcheck"
	"github.com/agentbox/agentbox/vmm"
)

// hostView is what one hostd data dir has on the host, observed from
// outside hostd: the QEMU processes that name the data dir (in their
// command line or cgroup), the network namespaces, cgroups and sandbox
// directories of its installation, each by sandbox id. Taps and nftables
// tables live inside the namespaces, so they go with them; hostLinks
// covers those that would leak into the host's own namespace.
type hostView struct {
	vmms    map[vmm.Process]string // VMM process → its sandbox id (-name)
	nets    map[string]bool
	cgroups map[string]bool
	dirs    map[string]bool
}

// observe lists what data dir's hostd has on the host now.
func observe(data string) (hostView, error) {
	v := hostView{vmms: qemusOf(data), cgroups: map[string]bool{}, dirs: map[string]bool{}, nets: map[string]bool{}}
	ids, err := netns.InstallationOf(data).List()
	if err != nil {
		return v, err
	}
	for _, id := range ids {
		v.nets[id] = true
	}
	for _, id := range leakcheck.Cgroups(data) {
		v.cgroups[id] = true
	}
	ents, err := os.ReadDir(filepath.Join(data, "sandboxes"))
	if err != nil && !os.IsNotExist(err) {
		return v, err
	}
	for _, e := range ents {
		v.dirs[e.Name()] = true
	}
	return v, nil
}

// qemusOf finds the running QEMU processes whose command line names data
// (their files are in its sandboxes/) or whose cgroup is data's hostd
// instance's. A zombie does not run.
func qemusOf(data string) map[vmm.Process]string {
	out := map[vmm.Process]string{}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	inst := leakcheck.Instance(data)
	for _, dir := range procs {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if !strings.Contains(filepath.Base(args[0]), "qemu") {
			continue
		}
		cg, _ := os.ReadFile(filepath.Join(dir, "cgroup"))
		if !strings.Contains(string(b), data+"/") && !strings.Contains(string(cg), "/"+inst+"/") {
			continue
		}
		p, err := vmm.Identify(pid)
		if err != nil {
			continue
		}
		id := "?"
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-name" {
				id = strings.TrimPrefix(args[i+1], "agentbox-")
			}
		}
		out[p] = id
	}
	return out
}

// recordedVM reads the VMM that hostd recorded for sandbox id.
func recordedVM(data, id string) (vmm.Process, error) {
	b, err := os.ReadFile(filepath.Join(data, "sandboxes", id, "vmm.json"))
	if err != nil {
		return vmm.Process{}, err
	}
	var st struct {
		Process vmm.Process `json:"process"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return vmm.Process{}, fmt.Errorf("%s vmm.json: %w", id, err)
	}
	return st.Process, nil
}

// expected is what may run after a restart: the listed sandboxes (by id,
// any state) and the VMM recorded for each running one.
type expected struct {
	listed  map[string]bool
	running map[string]vmm.Process
}

// leaksSince lists what of before (observed while no hostd ran, or before
// a delete) is still on the host although no listed sandbox owns it: a
// VMM that is not the recorded one of a running sandbox, a namespace or a
// cgroup of a sandbox that is not running, a directory of a sandbox that
// is not listed. A listed running sandbox with a second VMM is a leak too.
func leaksSince(before, now hostView, want expected) []string {
	var out []string
	for p, id := range before.vmms {
		if _, still := now.vmms[p]; still && want.running[id] != p {
			out = append(out, fmt.Sprintf("vmm pid %d (sandbox %s)", p.PID, id))
		}
	}
	for p, id := range now.vmms {
		if rec, ok := want.running[id]; ok && rec != p {
			if _, counted := before.vmms[p]; !counted {
				out = append(out, fmt.Sprintf("second vmm pid %d of running sandbox %s", p.PID, id))
			}
		}
	}
	for _, k := range []struct {
		kind         string
		before, now  map[string]bool
		runningToo   bool
		wantListings bool
	}{
		{"namespace", before.nets, now.nets, true, false},
		{"cgroup", before.cgroups, now.cgroups, true, false},
		{"sandbox dir", before.dirs, now.dirs, false, true},
	} {
		for id := range k.before {
			if !k.now[id] {
				continue
			}
			_, running := want.running[id]
			if k.runningToo && running || k.wantListings && want.listed[id] {
				continue
			}
			out = append(out, k.kind+" "+id)
		}
	}
	sort.Strings(out)
	return out
}

// only is the part of v that belongs to the sandboxes ids.
func (v hostView) only(ids map[string]bool) hostView {
	out := hostView{vmms: map[vmm.Process]string{}, nets: map[string]bool{}, cgroups: map[string]bool{}, dirs: map[string]bool{}}
	for p, id := range v.vmms {
		if ids[id] {
			out.vmms[p] = id
		}
	}
	for _, k := range [][2]map[string]bool{{v.nets, out.nets}, {v.cgroups, out.cgroups}, {v.dirs, out.dirs}} {
		for id := range k[0] {
			if ids[id] {
				k[1][id] = true
			}
		}
	}
	return out
}

// left lists everything of v: after every sandbox is deleted and hostd
// stopped, nothing of its data dir may be on the host.
func (v hostView) left() []string {
	var out []string
	for p, id := range v.vmms {
		out = append(out, fmt.Sprintf("vmm pid %d (sandbox %s)", p.PID, id))
	}
	for kind, m := range map[string]map[string]bool{"namespace": v.nets, "cgroup": v.cgroups, "sandbox dir": v.dirs} {
		for id := range m {
			out = append(out, kind+" "+id)
		}
	}
	sort.Strings(out)
	return out
}

// settle calls check until it finds nothing or grace has passed, and
// returns its last answer: a resource hostd removes a moment later (a VMM
// still exiting after SIGKILL) is not a leak; one still there after grace
// is.
func settle(grace time.Duration, check func() ([]string, error)) (left []string, waited time.Duration, err error) {
	start := time.Now()
	for {
		left, err = check()
		if err != nil || len(left) == 0 || time.Since(start) > grace {
			return left, time.Since(start), err
		}
		time.Sleep(2 * time.Second)
	}
}

// hostLinks lists the host namespace's taps and ifbs named as sandbox
// namespaces name theirs, and its nftables tables named as theirs: none
// should ever be there.
func hostLinks() ([]string, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list host links: %w", err)
	}
	var out []string
	for _, l := range links {
		if n := l.Attrs().Name; strings.HasPrefix(n, netns.TapName) || strings.HasPrefix(n, netns.IfbName) {
			out = append(out, "host link "+n)
		}
	}
	c, err := nftables.New()
	if err != nil {
		return out, fmt.Errorf("nftables: %w", err)
	}
	tables, err := c.ListTables()
	if err != nil {
		return out, fmt.Errorf("list host nftables tables: %w", err)
	}
	for _, t := range tables {
		if t.Name == netns.TableName {
			out = append(out, "host nftables table "+t.Name)
		}
	}
	return out, nil
}

// leaksAfter is what of before (the host while no hostd ran) is still there
// that no running sandbox owns, once leakGrace has given hostd time to clean.
func (r *restarter) leaksAfter(ctx context.Context, before hostView) (left []string, waited time.Duration, err error) {
	return settle(leakGrace, func() ([]string, error) {
		want, err := r.expected(ctx)
		if err != nil {
			return nil, err
		}
		now, err := observe(r.h.dataDir())
		return leaksSince(before, now, want), err
	})
}
