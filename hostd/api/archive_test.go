package api

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/hostd/sandbox"
)

func tarOf(t *testing.T, files map[string]string, extra ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range files {
		tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o600, Size: int64(len(body))})
		tw.Write([]byte(body))
	}
	for _, h := range extra {
		tw.WriteHeader(&h)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestArchiveRoundTrip(t *testing.T) {
	env := newTestEnv(t)
	resp := env.do(t, "PUT", "/v1/sandboxes/sb1/files/archive?path=/work/proj", bytes.NewReader(tarOf(t, map[string]string{"a.txt": "A", "sub/b.txt": "BB"})))
	if resp.StatusCode != 200 {
		t.Fatalf("put: got %d", resp.StatusCode)
	}
	var res ArchiveResult
	json.NewDecoder(resp.Body).Decode(&res)
	if res.Entries != 2 || res.Bytes != 3 {
		t.Errorf("result: %+v", res)
	}
	if f := mustFile(t, env, "/work/proj/sub/b.txt"); string(f.Data) != "BB" || f.Mode != 0o600 {
		t.Errorf("sub/b.txt: %+v", f)
	}

	resp = env.do(t, "GET", "/v1/sandboxes/sb1/files/archive?path=/work/proj", nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-tar" {
		t.Fatalf("get: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	tr := tar.NewReader(resp.Body)
	var names []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
	}
	if got := strings.Join(names, ","); got != "a.txt,sub/,sub/b.txt" {
		t.Errorf("names: %s", got)
	}
	wantError(t, env.do(t, "GET", "/v1/sandboxes/sb1/files/archive?path=/work/proj/a.txt", nil), 400, CodeNotADirectory)
	wantError(t, env.do(t, "GET", "/v1/sandboxes/sb1/files/archive?path=/nope", nil), 404, CodeFileNotFound)
}

func TestArchiveGzip(t *testing.T) {
	env := newTestEnv(t)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(tarOf(t, map[string]string{"z.txt": "zip"}))
	zw.Close()
	// Detected by its magic bytes...
	if resp := env.do(t, "PUT", "/v1/sandboxes/sb1/files/archive?path=/g1", bytes.NewReader(gz.Bytes())); resp.StatusCode != 200 {
		t.Fatalf("magic: got %d", resp.StatusCode)
	}
	// ...or declared.
	req, _ := http.NewRequest("PUT", env.srv.URL+"/v1/sandboxes/sb1/files/archive?path=/g2", bytes.NewReader(gz.Bytes()))
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := env.srv.Client().Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("header: %v %v", resp, err)
	}
	for _, p := range []string{"/g1/z.txt", "/g2/z.txt"} {
		if f := mustFile(t, env, p); string(f.Data) != "zip" {
			t.Errorf("%s = %q", p, f.Data)
		}
	}
}

func TestArchiveHostileEntry(t *testing.T) {
	env := newTestEnv(t)
	body := tarOf(t, nil, tar.Header{Name: "a", Typeflag: tar.TypeSymlink, Linkname: "/etc"})
	resp := env.do(t, "PUT", "/v1/sandboxes/sb1/files/archive?path=/d", bytes.NewReader(body))
	if resp.StatusCode != 400 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if e := errorOf(t, resp); e.Code != CodeInvalidArchive || !strings.Contains(e.Message, `"a"`) {
		t.Errorf("error: %+v", e)
	}
	resp = env.do(t, "PUT", "/v1/sandboxes/sb1/files/archive?path=/d", bytes.NewReader(tarOf(t, map[string]string{"../x": "evil"})))
	if e := errorOf(t, resp); resp.StatusCode != 400 || e.Code != CodeInvalidArchive || !strings.Contains(e.Message, `"../x"`) {
		t.Errorf("dotdot: %d %+v", resp.StatusCode, e)
	}
	if _, ok := env.m.File("/x"); ok {
		t.Error("/x was written")
	}
}

func TestWriteFileCreatesParents(t *testing.T) {
	env := newTestEnv(t)
	if resp := env.do(t, "PUT", "/v1/sandboxes/sb1/files?path=/new/deep/f.txt", strings.NewReader("x")); resp.StatusCode != 204 {
		t.Fatalf("put: got %d", resp.StatusCode)
	}
	if f := mustFile(t, env, "/new/deep"); !f.Dir {
		t.Errorf("/new/deep: %+v", f)
	}
}

func TestWatchStreamsNDJSON(t *testing.T) {
	env := newTestEnv(t)
	env.m.Mkdir(context.Background(), "sb1", "/w")
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	env.m.SetWatch(sandbox.WatchEvent{Type: "rename", Path: "/w/b", OldPath: "/w/a", Size: 3, Time: at})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", env.srv.URL+"/v1/sandboxes/sb1/files/watch?path=/w&recursive=true", nil)
	req.Header.Set("Authorization", "Bearer "+testKey)
	resp, err := env.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || ct != "application/x-ndjson" {
		t.Fatalf("%d %s", resp.StatusCode, ct)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	want := `{"is_dir":false,"old_path":"/w/a","path":"/w/b","size":3,"time":"2026-01-02T03:04:05.000000006Z","type":"rename"}` + "\n"
	if line != want {
		t.Errorf("line:\n got %s want %s", line, want)
	}
	cancel()
	io.Copy(io.Discard, resp.Body)
	wantError(t, env.do(t, "GET", "/v1/sandboxes/sb1/files/watch?path=/missing", nil), 404, CodeFileNotFound)
}
