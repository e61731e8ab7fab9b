package oci_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/agentbox/agentbox/images/oci"
)

// startRegistry serves go-containerregistry's registry on loopback; with a
// user, only to basic auth with user:pass.
func startRegistry(t *testing.T, user, pass string) string {
	t.Helper()
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if user != "" {
		inner := h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			inner.ServeHTTP(w, r)
		})
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return u.Host
}

func testImage(t *testing.T) v1.Image {
	return image(t, v1.Config{Env: []string{"PATH=/bin", "GREETING=hi"}, WorkingDir: "/work", User: "1000",
		Cmd: []string{"/bin/app"}, ExposedPorts: map[string]struct{}{"8080/tcp": {}}},
		layer(t, dir("bin"), file("bin/app", "app"), file("etc/motd", "one")),
		layer(t, file("etc/motd", "two"), hardlink("bin/app2", "bin/app")))
}

func push(t *testing.T, ref string, img v1.Image, opts ...remote.Option) {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img, opts...); err != nil {
		t.Fatal(err)
	}
}

// flattenRef opens ref and flattens it, returning etc/motd.
func flattenRef(t *testing.T, ref string, opts oci.SourceOptions) (string, error) {
	t.Helper()
	img, err := oci.Open(context.Background(), ref, opts)
	if err != nil {
		return "", err
	}
	root := t.TempDir()
	if _, err := oci.Flatten(context.Background(), img, root, oci.FlattenOptions{}); err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(root, "etc/motd"))
	return string(b), err
}

func TestOpenRegistry(t *testing.T) {
	img := testImage(t)
	host := startRegistry(t, "", "")
	push(t, host+"/app:v1", img)
	dg, _ := img.Digest()
	var pulled int64
	for _, ref := range []string{host + "/app:v1", host + "/app@" + dg.String()} {
		motd, err := flattenRef(t, ref, oci.SourceOptions{Progress: func(p oci.Progress) { pulled = p.Current }})
		if err != nil || motd != "two" {
			t.Errorf("%s: motd %q, %v; want the upper layer's", ref, motd, err)
		}
	}
	if pulled == 0 {
		t.Error("no pull progress reported")
	}
	if _, err := oci.Open(context.Background(), host+"/nope:v1", oci.SourceOptions{}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("unknown reference: %v, want an error naming it", err)
	}
}

func TestOpenRegistryAuth(t *testing.T) {
	host := startRegistry(t, "alice", "s3cret")
	push(t, host+"/private:v1", testImage(t), remote.WithAuth(&authn.Basic{Username: "alice", Password: "s3cret"}))
	ref := host + "/private:v1"
	if motd, err := flattenRef(t, ref, oci.SourceOptions{Keychain: oci.StaticKeychain(host, "alice", "s3cret")}); err != nil || motd != "two" {
		t.Errorf("with credentials: %q, %v", motd, err)
	}
	_, err := oci.Open(context.Background(), ref, oci.SourceOptions{Keychain: oci.StaticKeychain(host, "alice", "wrong")})
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "unauthorized") {
		t.Errorf("wrong credentials: %v, want unauthorized", err)
	}
	// A Docker config file gives them too.
	cfg := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, `{"auths":{%q:{"username":"alice","password":"s3cret"}}}`, host), 0o600); err != nil {
		t.Fatal(err)
	}
	kc, err := oci.DockerConfigKeychain(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if motd, err := flattenRef(t, ref, oci.SourceOptions{Keychain: kc}); err != nil || motd != "two" {
		t.Errorf("with a docker config: %q, %v", motd, err)
	}
}

func TestOpenLocal(t *testing.T) {
	dir := t.TempDir()
	img := testImage(t)
	lp, err := layout.Write(filepath.Join(dir, "layout"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	tag, _ := name.NewTag("app:v1")
	tarPath := filepath.Join(dir, "app.tar")
	if err := tarball.WriteToFile(tarPath, tag, img); err != nil { // the `docker save` format
		t.Fatal(err)
	}
	opts := oci.SourceOptions{LocalRoots: []string{dir}}
	for _, ref := range []string{filepath.Join(dir, "layout"), tarPath} {
		if motd, err := flattenRef(t, ref, opts); err != nil || motd != "two" {
			t.Errorf("%s: %q, %v", ref, motd, err)
		}
	}
	if _, err := oci.Open(context.Background(), tarPath, oci.SourceOptions{}); !errors.Is(err, oci.ErrBadRef) {
		t.Errorf("a local path without import roots: %v, want ErrBadRef", err)
	}
	junk := filepath.Join(dir, "junk.tar")
	if err := os.WriteFile(junk, []byte("not a tarball"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := oci.Open(context.Background(), junk, opts); !errors.Is(err, oci.ErrNotImage) {
		t.Errorf("a file that is not an image: %v, want ErrNotImage", err)
	}
}

// TestLayerDigestMismatch swaps a layer blob of an OCI layout for another
// valid layer: the content no longer matches the config's diff id.
func TestLayerDigestMismatch(t *testing.T) {
	dir := t.TempDir()
	img := testImage(t)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	ls, _ := img.Layers()
	dg, _ := ls[1].Digest()
	other := layer(t, file("etc/motd", "tampered"))
	rc, _ := other.Compressed()
	b, _ := io.ReadAll(rc)
	blob := filepath.Join(dir, "blobs", dg.Algorithm, dg.Hex)
	if err := os.Chmod(blob, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blob, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = flattenRef(t, dir, oci.SourceOptions{LocalRoots: []string{dir}})
	if !errors.Is(err, oci.ErrDigest) {
		t.Fatalf("got %v, want ErrDigest", err)
	}
}

func TestBuildBase(t *testing.T) {
	for _, tool := range []string{"mkfs.ext4", "qemu-img", "debugfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	host := startRegistry(t, "", "")
	push(t, host+"/app:v1", testImage(t))
	cache := t.TempDir()
	b := &oci.Builder{Dir: cache}
	img, err := oci.Open(context.Background(), host+"/app:v1", oci.SourceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	base, err := b.Build(context.Background(), img, oci.BuildOptions{FreeMiB: 16})
	if err != nil {
		t.Fatal(err)
	}
	if base.Cached || base.Config.WorkingDir != "/work" || base.Config.Env["GREETING"] != "hi" || base.Config.User != "1000" ||
		len(base.Config.ExposedPorts) != 1 || base.Config.Cmd[0] != "/bin/app" {
		t.Errorf("base: %+v", base)
	}
	raw := filepath.Join(t.TempDir(), "raw")
	if out, err := exec.Command("qemu-img", "convert", "-O", "raw", base.Path, raw).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	out, err := exec.Command("debugfs", "-R", "cat /etc/motd", raw).Output()
	if err != nil || string(out) != "two" {
		t.Errorf("/etc/motd in the ext4: %q, %v", out, err)
	}
	out, _ = exec.Command("debugfs", "-R", "stat /bin/app2", raw).Output()
	if !strings.Contains(string(out), "Links: 2") {
		t.Errorf("bin/app2 is not a hard link in the ext4:\n%s", out)
	}
	again, err := b.Build(context.Background(), img, oci.BuildOptions{FreeMiB: 16})
	if err != nil || !again.Cached || again.Path != base.Path {
		t.Errorf("second build: %+v, %v; want the cached base", again, err)
	}
	// Too large for the limit: an error, and nothing left in the cache.
	small := &oci.Builder{Dir: t.TempDir(), MaxBytes: 1024}
	if _, err := small.Build(context.Background(), img, oci.BuildOptions{}); !errors.Is(err, oci.ErrTooLarge) {
		t.Errorf("over the disk limit: %v, want ErrTooLarge", err)
	}
	if ents, _ := os.ReadDir(small.Dir); len(ents) != 0 {
		t.Errorf("a failed build left %d files", len(ents))
	}
}

func TestPlainHTTPPolicy(t *testing.T) {
	// No traffic leaves the process: the test transport answers every
	// request that the policy lets through with an error naming its scheme.
	const ref = "registry.invalid:5000/app:v1"
	_, err := oci.Open(context.Background(), ref, oci.SourceOptions{Transport: refuseAll{}})
	if err == nil || strings.Contains(err.Error(), "(http)") {
		t.Errorf("a remote registry: %v, want only HTTPS tried", err)
	}
	_, err = oci.Open(context.Background(), ref, oci.SourceOptions{Insecure: []string{"registry.invalid:5000"}, Transport: refuseAll{}})
	if err == nil || !strings.Contains(err.Error(), "(http)") {
		t.Errorf("a named insecure registry: %v, want plain HTTP let through", err)
	}
}

// refuseAll fails every request that reaches it, over HTTPS or a plain HTTP
// the policy let through.
type refuseAll struct{}

func (r refuseAll) RoundTrip(req *http.Request) (*http.Response, error) {
	return nil, fmt.Errorf("test transport: no network (%s)", req.URL.Scheme)
}
