package netns

import (
	"slices"
	"testing"

	"github.com/google/nftables"
	vnetns "github.com/vishvananda/netns"
)

func TestCreateSweep(t *testing.T) {
	inst := InstallationOf(t.TempDir())
	s, err := inst.Create("sb-test1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if !Exists(s.Name) {
		t.Fatalf("namespace %s missing", s.Name)
	}
	ns, err := vnetns.GetFromName(s.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatal(err)
	}
	tables, err := c.ListTables()
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) != 1 || tables[0].Name != TableName {
		t.Fatalf("tables in namespace: %v, want only %s", tables, TableName)
	}
	ids, err := inst.List()
	if err != nil || !slices.Equal(ids, []string{"sb-test1"}) {
		t.Fatalf("List = %v, %v", ids, err)
	}
	if err := s.CloseSockets(); err != nil {
		t.Fatal(err)
	}
	removed, failed, err := inst.Sweep(nil)
	if err != nil || failed != nil || !slices.Equal(removed, []string{"sb-test1"}) {
		t.Fatalf("Sweep = %v, %v, %v", removed, failed, err)
	}
	if Exists(s.Name) {
		t.Fatalf("namespace %s still there", s.Name)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close after Sweep: %v", err)
	}
}
