//go:build vm

package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/snapshot"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// testUIDs is the VMM uid range of the VM tests: hostd's default one.
var testUIDs = sandbox.UIDRange{First: 2000000000, Last: 2000065535}

// jailed gives a manager's VMMs a uid each, as hostd does by default.
func jailed(o *sandbox.Options) {
	if o.VMMOwner == nil {
		r := testUIDs
		o.VMMUIDs = &r
	}
}

// vmmUser is the uid and gid that process pid runs as (all four of real,
// effective, saved and filesystem ids must agree).
func vmmUser(t *testing.T, pid int) (int, int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int{}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ":")
		if k != "Uid" && k != "Gid" {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 4 || f[0] != f[1] || f[0] != f[2] || f[0] != f[3] {
			t.Fatalf("pid %d: %s: %v, want four equal ids", pid, k, f)
		}
		ids[k], _ = strconv.Atoi(f[0])
	}
	return ids["Uid"], ids["Gid"]
}

// asUser runs sh -c script as uid:gid (no other groups) and reports
// whether it exited 0.
func asUser(t *testing.T, uid, gid int, script string) bool {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	return cmd.Run() == nil
}

// TestVMMUserPerSandbox checks the default jail: each sandbox's QEMU runs
// as a uid of its own, in a mount namespace of its own, chrooted into its
// directory, which cannot signal
// another sandbox's QEMU nor reach its files, and snapshot, fork, restore
// and pause/resume work.
func TestVMMUserPerSandbox(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the jail needs root")
	}
	data := vmmtest.ShortTempDir(t)
	m, ctx := newManager(t, data), context.Background()
	create := func(opts sandbox.CreateOptions) sandbox.Info {
		t.Helper()
		sb, err := m.Create(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Delete(context.Background(), sb.ID) })
		return sb
	}
	a, b := create(sandbox.CreateOptions{}), create(sandbox.CreateOptions{})
	ua, ga := vmmUser(t, a.VMPID)
	ub, gb := vmmUser(t, b.VMPID)
	if ua < testUIDs.First || ua > testUIDs.Last || ub < testUIDs.First || ub > testUIDs.Last || ua == ub || ga != ua || gb != ub {
		t.Fatalf("qemus run as %d:%d and %d:%d, want two distinct uid:uid of %v", ua, ga, ub, gb, testUIDs)
	}
	dirA := filepath.Join(data, "sandboxes", a.ID)
	// QEMU is chrooted into its directory (-chroot).
	if root, err := os.Readlink(fmt.Sprintf("/proc/%d/root", a.VMPID)); err != nil || root != dirA {
		t.Errorf("%s's qemu has root %q (%v), want %s", a.ID, root, err, dirA)
	}
	// In a mount namespace of its own, where no mount is within its reach.
	for _, sb := range []sandbox.Info{a, b} {
		ns, err1 := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", sb.VMPID))
		ours, err2 := os.Readlink("/proc/self/ns/mnt")
		if err1 != nil || err2 != nil || ns == ours {
			t.Errorf("%s's qemu is in mount namespace %q, hostd's is %q (%v, %v): want its own", sb.ID, ns, ours, err1, err2)
		}
		if mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", sb.VMPID)); err != nil || len(mi) != 0 {
			t.Errorf("%s's qemu sees mounts (%v):\n%s", sb.ID, err, mi)
		}
	}
	if nsA, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", a.VMPID)); nsA != "" {
		if nsB, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", b.VMPID)); nsA == nsB {
			t.Errorf("two qemus share mount namespace %s", nsA)
		}
	}
	disks, _ := filepath.Glob(filepath.Join(dirA, "disk-*.qcow2"))
	if len(disks) != 1 {
		t.Fatalf("overlays of %s: %v", a.ID, disks)
	}
	// As QEMU does, a child started in a's directory names its files
	// relative to it: the directories above stay closed (0700).
	t.Chdir(dirA)
	disk := filepath.Base(disks[0])
	// `: >>` opens for writing and writes nothing.
	if !asUser(t, ua, ga, ": >> "+disk+" && cat console.log >/dev/null") {
		t.Fatalf("%s's own uid cannot open its overlay for writing, or read its console", a.ID)
	}
	for what, script := range map[string]string{
		"open its overlay":    ": >> " + disk,
		"read its console":    "cat console.log",
		"create a file in it": ": > planted",
		"signal its qemu":     fmt.Sprintf("kill -0 %d", a.VMPID),
	} {
		if asUser(t, ub, gb, script) {
			t.Errorf("%s's uid could %s of %s", b.ID, what, a.ID)
		}
	}
	for what, script := range map[string]string{
		"create a file in its own directory (and plant links for hostd)": ": > planted",
		"list the sandboxes": "ls " + filepath.Join(data, "sandboxes"),
		"read the store":     "cat " + filepath.Join(data, "agentbox.db"),
		"read the snapshots": "ls " + filepath.Join(data, "snapshots"),
	} {
		if asUser(t, ua, ga, script) {
			t.Errorf("%s's uid could %s", a.ID, what)
		}
	}
	if fi, _ := os.Stat(data); fi.Mode().Perm() != 0o700 {
		t.Errorf("data dir mode %04o, want 0700", fi.Mode().Perm())
	}

	run(t, m, a.ID, "echo one > /root/f", 0)
	sn, err := m.Snapshot(ctx, a.ID, sandbox.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	layer := filepath.Join(data, "snapshots", sn.ID, snapshot.LayerFile)
	if fi, err := os.Stat(layer); err != nil || fi.Mode().Perm() != 0o444 || fi.Sys().(*syscall.Stat_t).Uid != 0 {
		t.Errorf("frozen layer %s: %v, %v; want root's, 0444", layer, fi.Mode(), err)
	}
	if out, _ := run(t, m, a.ID, "echo two >> /root/f; cat /root/f", 0); out != "one\ntwo\n" {
		t.Fatalf("after the snapshot: %q", out)
	}

	forks, err := m.Fork(ctx, a.ID, sandbox.ForkOptions{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	f := forks[0]
	t.Cleanup(func() { _ = m.Delete(context.Background(), f.ID) })
	if uf, _ := vmmUser(t, f.VMPID); uf == ua || uf == ub || uf < testUIDs.First {
		t.Errorf("the fork's qemu runs as %d (a %d, b %d), want a uid of its own", uf, ua, ub)
	}
	// A snapshot of a restored VM freezes an overlay on a snapshot's layer.
	run(t, m, f.ID, "echo fork >> /root/f", 0)
	snF, err := m.Snapshot(ctx, f.ID, sandbox.SnapshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if out, _ := run(t, m, f.ID, "cat /root/f", 0); out != "one\ntwo\nfork\n" {
		t.Errorf("fork after its snapshot: %q", out)
	}
	r := create(sandbox.CreateOptions{Snapshot: snF.ID})
	if out, _ := run(t, m, r.ID, "cat /root/f", 0); out != "one\ntwo\nfork\n" {
		t.Errorf("restored from the fork's snapshot: %q", out)
	}

	if _, err := m.Pause(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	res, err := m.Resume(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if u, _ := vmmUser(t, res.VMPID); u != ua {
		t.Errorf("resumed qemu runs as %d, want its recorded uid %d", u, ua)
	}
	if out, _ := run(t, m, a.ID, "echo three >> /root/f; cat /root/f", 0); out != "one\ntwo\nthree\n" {
		t.Errorf("after pause and resume: %q", out)
	}
}
