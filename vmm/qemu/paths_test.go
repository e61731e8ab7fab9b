package qemu

import "testing"

func TestDirPaths(t *testing.T) {
	const dir = "/data/sandboxes/sb-1"
	for in, want := range map[string]string{
		dir + "/disk-0.qcow2":          "disk-0.qcow2",
		dir + "/paused/memory":         dir + "/paused/memory",
		"/data/snapshots/sn-1/layer":   "/data/snapshots/sn-1/layer",
		"/data/sandboxes/sb-10/disk-0": "/data/sandboxes/sb-10/disk-0",
	} {
		if got := inDir(dir+"/", in); got != want {
			t.Errorf("inDir(%s) = %s, want %s", in, got, want)
		}
	}
	for name, want := range map[string]string{
		"disk-1.qcow2":          dir + "/disk-1.qcow2",
		"/elsewhere/disk.qcow2": "/elsewhere/disk.qcow2",
		`json:{"backing": {"driver": "qcow2", "file": {"driver": "file", "filename": "disk-0.qcow2"}}, "driver": "qcow2", "file": {"driver": "file", "filename": "disk-1.qcow2"}}`: dir + "/disk-1.qcow2",
	} {
		if got, err := hostPath(dir, name); err != nil || got != want {
			t.Errorf("hostPath(%s) = %s, %v; want %s", name, got, err, want)
		}
	}
	if _, err := hostPath(dir, "json:{}"); err == nil {
		t.Error("a json: name without a file was accepted")
	}
}
