package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// newTestJail is a jail of uids first..last on a fresh data directory,
// claiming its uids in a claims directory of the test's.
func newTestJail(t *testing.T, first, last int) (*vmmJail, string) {
	t.Helper()
	return newTestJailIn(t, first, last, t.TempDir())
}

// newTestJailIn is newTestJail with the host's uid claims in claims.
func newTestJailIn(t *testing.T, first, last int, claims string) (*vmmJail, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("handing files to other users needs root")
	}
	data := filepath.Join(t.TempDir(), "data") // under a 0700 directory
	if err := os.MkdirAll(filepath.Join(data, "sandboxes"), 0o700); err != nil {
		t.Fatal(err)
	}
	j, err := newJail(Options{DataDir: data, VMMUIDs: &UIDRange{First: first, Last: last}, UIDClaims: claims})
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(filepath.Join(data, "sandboxes")); fi.Mode().Perm() != 0o700 {
		t.Errorf("sandboxes/ mode %04o, want it kept 0700", fi.Mode().Perm())
	}
	return j, data
}

func mkSandboxDir(t *testing.T, data, id string) string {
	t.Helper()
	d := filepath.Join(data, "sandboxes", id)
	if err := os.Mkdir(d, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestJailGivesEachSandboxItsOwnUser(t *testing.T) {
	j, data := newTestJail(t, 2000000100, 2000000101)
	a, b, c := mkSandboxDir(t, data, "a"), mkSandboxDir(t, data, "b"), mkSandboxDir(t, data, "c")
	for _, d := range []string{a, b} {
		if err := j.claim(d); err != nil {
			t.Fatal(err)
		}
	}
	ua, _ := runAsOf(a)
	ub, _ := runAsOf(b)
	if ua == nil || ub == nil || ua.UID == ub.UID || ua.UID != ua.GID {
		t.Fatalf("got users %v and %v, want two distinct uid:uid", ua, ub)
	}
	fi, _ := os.Stat(a)
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o710 || st.Uid != 0 || int(st.Gid) != ua.GID {
		t.Errorf("sandbox dir: mode %04o owner %d:%d, want 0710 root:%d", fi.Mode().Perm(), st.Uid, st.Gid, ua.GID)
	}
	disk := filepath.Join(a, "disk-0.qcow2")
	if err := os.WriteFile(disk, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ownFiles(disk); err != nil {
		t.Fatal(err)
	}
	fi, _ = os.Stat(disk)
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != ua.UID || fi.Mode().Perm() != 0o600 {
		t.Errorf("overlay: mode %04o owner %d, want 0600 %d", fi.Mode().Perm(), st.Uid, ua.UID)
	}
	// A claimed directory keeps its user (a resume, or a restore into it).
	if err := j.claim(a); err != nil {
		t.Fatal(err)
	}
	if u, _ := runAsOf(a); *u != *ua {
		t.Errorf("claimed again: %v, want %v", u, ua)
	}
	if err := j.claim(c); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("third claim of a two-uid range: %v, want every uid in use", err)
	}
	// A uid is free again once its sandbox's directory is gone.
	if err := os.RemoveAll(a); err != nil {
		t.Fatal(err)
	}
	if err := j.claim(c); err != nil {
		t.Fatal(err)
	}
	if uc, _ := runAsOf(c); uc.UID != ua.UID {
		t.Errorf("got %v, want the freed %v", uc, ua)
	}
}

func TestJailSeesUsersOfEarlierHostds(t *testing.T) {
	j, data := newTestJail(t, 2000000100, 2000000101)
	a := mkSandboxDir(t, data, "a")
	if err := j.claim(a); err != nil {
		t.Fatal(err)
	}
	// A new hostd on the same data directory.
	j2, err := newJail(Options{DataDir: data, VMMUIDs: j.uids, UIDClaims: j.claims.dir})
	if err != nil {
		t.Fatal(err)
	}
	b := mkSandboxDir(t, data, "b")
	if err := j2.claim(b); err != nil {
		t.Fatal(err)
	}
	ua, _ := runAsOf(a)
	ub, _ := runAsOf(b)
	if ua.UID == ub.UID {
		t.Fatalf("both sandboxes got uid %d", ua.UID)
	}
}

func TestJailOffLeavesDirectoriesAlone(t *testing.T) {
	data := t.TempDir()
	d := filepath.Join(data, "sandboxes", "a")
	if err := os.MkdirAll(d, 0o700); err != nil {
		t.Fatal(err)
	}
	before, _ := os.Stat(data)
	j, err := newJail(Options{DataDir: data})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.claim(d); err != nil {
		t.Fatal(err)
	}
	if u, err := runAsOf(d); u != nil || err != nil {
		t.Fatalf("got %v, %v; want no vmm user", u, err)
	}
	if fi, _ := os.Stat(data); fi.Mode() != before.Mode() {
		t.Errorf("data dir mode %04o, want it untouched", fi.Mode().Perm())
	}
}

func TestJailRefusesBadRanges(t *testing.T) {
	for _, r := range []UIDRange{{0, 10}, {20, 10}, {1, maxID + 1}} {
		if _, err := newJail(Options{DataDir: t.TempDir(), VMMUIDs: &r}); err == nil {
			t.Errorf("range %v accepted", r)
		}
	}
	if _, err := newJail(Options{DataDir: t.TempDir(), VMMUIDs: &UIDRange{1, 2}, VMMOwner: &Owner{1, 1}}); err == nil {
		t.Error("a range and an owner accepted")
	}
}

// TestJailUIDsUniqueOnTheHost: two hostds (data directories) given the same
// range never hand out one uid twice; a uid is free again on the host once
// its sandbox's directory is gone; claims lost with /run (a reboot) are
// made again by the hostd whose sandboxes hold them.
func TestJailUIDsUniqueOnTheHost(t *testing.T) {
	claims := t.TempDir()
	j1, data1 := newTestJailIn(t, 2000000100, 2000000101, claims)
	j2, data2 := newTestJailIn(t, 2000000100, 2000000101, claims)
	a, b := mkSandboxDir(t, data1, "a"), mkSandboxDir(t, data2, "b")
	for _, c := range []struct {
		j   *vmmJail
		dir string
	}{{j1, a}, {j2, b}} {
		if err := c.j.claim(c.dir); err != nil {
			t.Fatal(err)
		}
	}
	ua, _ := runAsOf(a)
	ub, _ := runAsOf(b)
	if ua == nil || ub == nil || ua.UID == ub.UID {
		t.Fatalf("two hostds on one range got %v and %v, want distinct uids", ua, ub)
	}
	c := mkSandboxDir(t, data2, "c")
	if err := j2.claim(c); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("third claim on the host of a two-uid range: %v, want every uid in use", err)
	}
	if err := os.RemoveAll(a); err != nil {
		t.Fatal(err)
	}
	if err := j2.claim(c); err != nil {
		t.Fatal(err)
	}
	if uc, _ := runAsOf(c); uc.UID != ua.UID {
		t.Errorf("got %v, want the uid %v freed by the other hostd", uc, ua)
	}
	// A reboot clears the claims; the next hostd on data2 claims its uids
	// again before handing out any, so a third hostd cannot take them.
	if err := os.RemoveAll(claims); err != nil {
		t.Fatal(err)
	}
	j2b, err := newJail(Options{DataDir: data2, VMMUIDs: j2.uids, UIDClaims: claims})
	if err != nil {
		t.Fatal(err)
	}
	d := mkSandboxDir(t, data2, "d")
	if err := j2b.claim(d); err == nil {
		t.Fatalf("claim with both uids held by data2's sandboxes: %v", err)
	}
	j3, data3 := newTestJailIn(t, 2000000100, 2000000101, claims)
	if err := j3.claim(mkSandboxDir(t, data3, "e")); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("a third hostd after the reboot: %v, want every uid in use", err)
	}
}
