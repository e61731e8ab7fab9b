package hostd

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/vmm"
)

// namedDriver is a driver that only has a name.
type namedDriver struct {
	vmm.Driver
	name string
}

func (d namedDriver) Name() string { return d.name }

// idFiles points the user, group and id map files at test copies.
func idFiles(t *testing.T, passwd, group, idMap string) {
	t.Helper()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	old := []string{passwdFile, groupFile, uidMapFile, gidMapFile}
	passwdFile, groupFile = write("passwd", passwd), write("group", group)
	uidMapFile, gidMapFile = write("uid_map", idMap), write("gid_map", idMap)
	t.Cleanup(func() { passwdFile, groupFile, uidMapFile, gidMapFile = old[0], old[1], old[2], old[3] })
}

func TestVMMJailChoices(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the default jail needs root")
	}
	idFiles(t, "root:x:0:0::/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n", "root:x:0:\n", "0 0 4294967295\n")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	qemu := namedDriver{name: "qemu"}
	data := t.TempDir()
	run := func(cfg Config, drv vmm.Driver) (sandbox.Options, error) {
		var o sandbox.Options
		if cfg.DataDir == "" {
			cfg.DataDir = data
		}
		err := vmmJail(cfg, drv, log, &o)
		return o, err
	}
	o, err := run(Config{}, qemu)
	if err != nil || o.VMMUIDs == nil || *o.VMMUIDs != (sandbox.UIDRange{First: 2000000000, Last: 2000065535}) {
		t.Errorf("default: %+v, %v; want the default range", o.VMMUIDs, err)
	}
	for _, cfg := range []Config{{VMMUser: "root"}, {VMMUIDs: "off"}, {VMMUser: "root", VMMUIDs: "off"}} {
		if o, err := run(cfg, qemu); err != nil || o.VMMUIDs != nil || o.VMMOwner != nil {
			t.Errorf("%+v: %+v, %v; want root", cfg, o, err)
		}
	}
	if o, err := run(Config{VMMUser: "nobody"}, qemu); err != nil || o.VMMOwner == nil || o.VMMOwner.UID != 65534 || o.VMMUIDs != nil {
		t.Errorf("--vmm-user nobody: %+v, %v", o, err)
	}
	if o, err := run(Config{VMMUIDs: "3000-3999"}, qemu); err != nil || *o.VMMUIDs != (sandbox.UIDRange{First: 3000, Last: 3999}) {
		t.Errorf("--vmm-uids 3000-3999: %+v, %v", o.VMMUIDs, err)
	}
	// The default gives way on a backend that cannot drop; a choice fails.
	ch := namedDriver{name: "cloud-hypervisor"}
	if o, err := run(Config{}, ch); err != nil || o.VMMUIDs != nil {
		t.Errorf("cloud-hypervisor default: %+v, %v; want root", o, err)
	}
	if _, err := run(Config{VMMUIDs: "3000-3999"}, ch); err == nil || !strings.Contains(err.Error(), "only the qemu backend") {
		t.Errorf("cloud-hypervisor with a range: %v", err)
	}
	if _, err := run(Config{VMMUser: "nobody", VMMUIDs: "3000-3999"}, qemu); err == nil || !strings.Contains(err.Error(), "choose one") {
		t.Errorf("both: %v", err)
	}
}

func TestVMMUIDsRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the jail needs root")
	}
	idFiles(t, "root:x:0:0::/root:/bin/sh\nsvc:x:999:3500::/:/bin/false\nbig:x:2000000007:100::/:/bin/false\n",
		"root:x:0:\nteam:x:4100:\n", "0 0 10000\n")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range []struct{ uids, want string }{
		{"3000-3999", `user "svc" (id 3500`},
		{"4000-4999", `group "team" (id 4100`},
		{"5000-20000", "not mapped in this user namespace"},
		{"0-100", "want 1 <= first"},
		{"200-100", "want 1 <= first"},
		{"100", "want FIRST-LAST"},
		{"a-b", "want FIRST-LAST"},
		{"1-4294967296", "want FIRST-LAST"},
	} {
		err := vmmJail(Config{VMMUIDs: c.uids}, namedDriver{name: "qemu"}, log, &sandbox.Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "--vmm-uids") {
			t.Errorf("%s: got %v, want an error naming %q", c.uids, err, c.want)
		}
	}
	if err := vmmJail(Config{VMMUIDs: "5000-5999"}, namedDriver{name: "qemu"}, log, &sandbox.Options{}); err != nil {
		t.Errorf("a free, mapped range: %v", err)
	}
}
