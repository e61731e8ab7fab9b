//go:build vm

package hostd_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/client"
)

// TestFilesArchiveAndWatch covers the file API's tree operations on a real
// guest: a PUT under missing parents, a tar up and down, a hostile tar
// refused with nothing written outside its directory, and a watch that sees
// a create, modify, delete and rename made by a guest process.
func TestFilesArchiveAndWatch(t *testing.T) {
	c, _ := startHostd(t)
	ctx := context.Background()
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 512})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { c.DeleteSandbox(context.Background(), sb.ID) })

	// PUT to a missing parent.
	if err := c.WriteFile(ctx, sb.ID, "/srv/new/deep/f.txt", 0, strings.NewReader("deep")); err != nil {
		t.Fatalf("write under missing parents: %v", err)
	}
	if out := mustExec(t, c, sb.ID, "stat", "-c", "%a %U", "/srv/new/deep").Stdout; strings.TrimSpace(out) != "755 root" {
		t.Errorf("created parent: %q, want 755 root", out)
	}

	// Archive up and down.
	var up bytes.Buffer
	tw := tar.NewWriter(&up)
	files := map[string]string{"a.txt": "alpha", "sub/b.py": "print(6*7)\n", "sub/deeper/c": strings.Repeat("c", 3<<20)}
	for _, name := range []string{"a.txt", "sub/b.py", "sub/deeper/c"} {
		tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o640, Size: int64(len(files[name]))})
		tw.Write([]byte(files[name]))
	}
	tw.Close()
	res, err := c.PutArchive(ctx, sb.ID, "/srv/proj", &up)
	if err != nil || res.Entries != 3 || res.Bytes != int64(len(files["a.txt"])+len(files["sub/b.py"])+3<<20) {
		t.Fatalf("put archive: %+v, %v", res, err)
	}
	if out := mustExec(t, c, sb.ID, "python3", "/srv/proj/sub/b.py").Stdout; out != "42\n" {
		t.Errorf("unpacked script printed %q", out)
	}
	var down bytes.Buffer
	if err := c.GetArchive(ctx, sb.ID, "/srv/proj", &down); err != nil {
		t.Fatalf("get archive: %v", err)
	}
	got := map[string]string{}
	tr := tar.NewReader(&down)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		if h.Typeflag == tar.TypeReg {
			var b bytes.Buffer
			b.ReadFrom(tr)
			got[h.Name] = b.String()
			if h.Mode != 0o640 {
				t.Errorf("%s: mode %o", h.Name, h.Mode)
			}
		}
	}
	for name, want := range files {
		if got[name] != want {
			t.Errorf("round trip %s: %d bytes, want %d", name, len(got[name]), len(want))
		}
	}

	// A hostile archive: a symlink to /etc, then a file through it.
	var bad bytes.Buffer
	tw = tar.NewWriter(&bad)
	tw.WriteHeader(&tar.Header{Name: "ok.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2})
	tw.Write([]byte("ok"))
	tw.WriteHeader(&tar.Header{Name: "a", Typeflag: tar.TypeSymlink, Linkname: "/etc"})
	tw.WriteHeader(&tar.Header{Name: "a/agentbox-owned", Typeflag: tar.TypeReg, Mode: 0o644, Size: 4})
	tw.Write([]byte("evil"))
	tw.WriteHeader(&tar.Header{Name: "../agentbox-escaped", Typeflag: tar.TypeReg, Mode: 0o644, Size: 4})
	tw.Write([]byte("evil"))
	tw.Close()
	_, err = c.PutArchive(ctx, sb.ID, "/srv/hostile", &bad)
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 400 || ae.Code != "invalid_archive" || !strings.Contains(ae.Message, `"a"`) {
		t.Errorf("hostile archive: %v, want 400 invalid_archive naming \"a\"", err)
	}
	if out := mustExec(t, c, sb.ID, "sh", "-c", "ls /etc/agentbox-owned /srv/agentbox-escaped /srv/hostile/a 2>&1; true").Stdout; strings.Count(out, "No such file") != 3 {
		t.Errorf("something landed outside the archive's directory: %s", out)
	}

	checkWatch(t, c, sb.ID)
}

func checkWatch(t *testing.T, c *client.Client, id string) {
	mustExec(t, c, id, "mkdir", "-p", "/srv/w")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	events := make(chan client.WatchEvent, 64)
	done := make(chan error, 1)
	go func() {
		done <- c.Watch(ctx, id, "/srv/w", true, func(ev client.WatchEvent) error {
			events <- ev
			return nil
		})
	}()
	want := []struct{ typ, path string }{
		{"create", "/srv/w/f"}, {"modify", "/srv/w/f"}, {"rename", "/srv/w/g"}, {"delete", "/srv/w/g"},
	}
	// The watch is registered when the first request returns; repeat the
	// script until its events show up, so the test does not race it.
	script := "echo one > /srv/w/f; sleep 0.2; echo two >> /srv/w/f; sleep 0.2; mv /srv/w/f /srv/w/g; sleep 0.2; rm /srv/w/g"
	next := 0
	for attempt := 0; attempt < 5 && next < len(want); attempt++ {
		mustExec(t, c, id, "sh", "-c", script)
		next = 0
		deadline := time.After(20 * time.Second)
	collect:
		for next < len(want) {
			select {
			case ev := <-events:
				if string(ev.Type) == want[next].typ && ev.Path == want[next].path {
					if ev.Type == "rename" && ev.OldPath != "/srv/w/f" {
						t.Errorf("rename old_path = %q", ev.OldPath)
					}
					next++
				}
			case err := <-done:
				t.Fatalf("watch ended: %v", err)
			case <-deadline:
				break collect
			}
		}
	}
	if next < len(want) {
		t.Errorf("watch saw %d of %v", next, want)
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("watch: %v", err)
	}
}
