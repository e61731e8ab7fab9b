//go:build vm

package hostd_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// TestImageBadInput sends POST /v1/templates the images a caller can get
// wrong: credentials the registry refuses, a layer whose content is not
// its config's digest, a tarball that is no image, layers that escape
// their root, an image over hostd's limit. Each is a clear 4xx, leaves no
// template, and hostd stays healthy; then registry credentials and a
// `docker save` tarball build templates through hostd.
func TestImageBadInput(t *testing.T) {
	imports := t.TempDir()
	u, stop := runHostd(t, vmmtest.ShortTempDir(t), func(cfg *hostd.Config) {
		cfg.Images.ImportDirs = append(cfg.Images.ImportDirs, imports)
		cfg.Images.MaxMiB = 8
	})
	t.Cleanup(stop)
	c, err := client.New(u, testKey)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	ref, _ := serveAuthImage(t, "bb:1", busyboxImage(t), "reguser", "regpass")
	for name, value := range map[string]string{"reg-good": "reguser:regpass", "reg-bad": "reguser:wrong"} {
		if _, err := c.CreateSecret(ctx, name, value); err != nil {
			t.Fatal(err)
		}
	}
	save := func(file string, img v1.Image) string {
		t.Helper()
		p := filepath.Join(imports, file)
		tag, _ := name.NewTag("local/img:1")
		if err := tarball.WriteToFile(p, tag, img); err != nil {
			t.Fatal(err)
		}
		return p
	}
	notImage := filepath.Join(imports, "notimage.tar")
	writeTar(t, notImage, []*tar.Header{{Name: "hello.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: 5}}, []byte("hello"))
	outside := t.TempDir() // where an absolute symlink in a layer points
	cases := []struct {
		name   string
		src    client.ImageSource
		code   string
		status int
	}{
		{"refused credentials", client.ImageSource{Ref: ref, RegistrySecret: "reg-bad"}, "registry_auth", 422},
		{"no credentials", client.ImageSource{Ref: ref}, "registry_auth", 422},
		{"digest mismatch", client.ImageSource{Ref: save("digest.tar", wrongDiffID(t, busyboxImage(t)))}, "bad_image", 422},
		{"not an image", client.ImageSource{Ref: notImage}, "", 0},
		{"dot-dot entry", client.ImageSource{Ref: save("dotdot.tar", layerImage(t, []*tar.Header{
			{Name: "../escaped", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}}, []byte("x")))}, "bad_image", 422},
		{"hard link out", client.ImageSource{Ref: save("hardlink.tar", layerImage(t, []*tar.Header{
			{Name: "passwd", Typeflag: tar.TypeLink, Linkname: "../../../../etc/passwd"}}, nil))}, "bad_image", 422},
		{"over the limit", client.ImageSource{Ref: save("big.tar", layerImage(t, []*tar.Header{
			{Name: "big", Typeflag: tar.TypeReg, Mode: 0o644, Size: 16 << 20}}, make([]byte, 16<<20)))}, "image_too_large", 422},
	}
	for i, tc := range cases {
		tpl := "bad" + itoa(i)
		_, err := c.BuildTemplateFromImage(ctx, tpl, 0, tc.src, nil)
		var ae *client.APIError
		switch {
		case !errors.As(err, &ae):
			t.Errorf("%s: %v, want an API error", tc.name, err)
		case ae.Status/100 != 4:
			t.Errorf("%s: %d %s (%s), want a 4xx", tc.name, ae.Status, ae.Code, ae.Message)
		case tc.code != "" && (ae.Code != tc.code || ae.Status != tc.status):
			t.Errorf("%s: %d %s (%s), want %d %s", tc.name, ae.Status, ae.Code, ae.Message, tc.status, tc.code)
		default:
			t.Logf("%s: %d %s: %s", tc.name, ae.Status, ae.Code, ae.Message)
		}
		if _, err := c.GetTemplate(ctx, tpl); err == nil {
			t.Errorf("%s: left template %s", tc.name, tpl)
		}
		if _, err := c.Health(ctx); err != nil {
			t.Fatalf("%s: hostd unhealthy after it: %v", tc.name, err)
		}
	}
	// An absolute symlink, then a file through it: resolved inside the
	// image's root (as Docker does), never on the host.
	abs := save("abslink.tar", layerImage(t, []*tar.Header{
		{Name: "evil", Typeflag: tar.TypeSymlink, Linkname: outside},
		{Name: "evil/pwned", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}}, []byte("x")))
	_, err = c.BuildTemplateFromImage(ctx, "abslink", 0, client.ImageSource{Ref: abs, FreeMiB: 16}, nil)
	t.Logf("absolute symlink, then a file through it: %v", err)
	if _, err := os.Stat(filepath.Join(outside, "pwned")); err == nil {
		t.Error("a layer wrote through an absolute symlink onto the host")
	}
	if _, err := c.Health(ctx); err != nil {
		t.Fatalf("hostd unhealthy: %v", err)
	}

	// Credentials from a hostd secret, and a `docker save` tarball.
	if _, err := c.BuildTemplateFromImage(ctx, "authed", 0, client.ImageSource{Ref: ref, RegistrySecret: "reg-good", FreeMiB: 64}, nil); err != nil {
		t.Fatalf("build with the registry's credentials: %v", err)
	}
	tb := save("busybox.tar", busyboxImage(t))
	if _, err := c.BuildTemplateFromImage(ctx, "saved", 0, client.ImageSource{Ref: tb, FreeMiB: 64}, nil); err != nil {
		t.Fatalf("build from a docker save tarball: %v", err)
	}
	for _, tpl := range []string{"authed", "saved"} {
		sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: tpl})
		if err != nil {
			t.Fatalf("sandbox of %s: %v", tpl, err)
		}
		if r := mustExec(t, c, sb.ID, "echo", "hi"); r.Stdout != "hi\n" {
			t.Errorf("%s: echo: %+v", tpl, r)
		}
		_ = c.DeleteSandbox(ctx, sb.ID)
	}
}

// serveAuthImage is serveImage behind HTTP basic auth (user, pass).
func serveAuthImage(t *testing.T, repoTag string, img v1.Image, user, pass string) (ref, host string) {
	t.Helper()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	pu, _ := url.Parse(srv.URL)
	ref = pu.Host + "/" + repoTag
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img, remote.WithAuth(&authn.Basic{Username: user, Password: pass})); err != nil {
		t.Fatal(err)
	}
	return ref, pu.Host
}

// layerImage is an image of one layer holding hdrs (regular files' bytes
// taken in order from body).
func layerImage(t *testing.T, hdrs []*tar.Header, body []byte) v1.Image {
	t.Helper()
	var buf bytes.Buffer
	tarInto(t, &buf, hdrs, body)
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf.OS, cf.Architecture = "linux", "amd64"
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// wrongDiffID is img with its config naming another digest for its layer.
func wrongDiffID(t *testing.T, img v1.Image) v1.Image {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.RootFS.DiffIDs[0] = v1.Hash{Algorithm: "sha256", Hex: "0000000000000000000000000000000000000000000000000000000000000000"}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func tarInto(t *testing.T, w io.Writer, hdrs []*tar.Header, body []byte) {
	t.Helper()
	tw := tar.NewWriter(w)
	for _, h := range hdrs {
		h.ModTime = time.Unix(1700000000, 0)
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			n := int(h.Size)
			if _, err := tw.Write(body[:n]); err != nil {
				t.Fatal(err)
			}
			body = body[n:]
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

func writeTar(t *testing.T, path string, hdrs []*tar.Header, body []byte) {
	t.Helper()
	var buf bytes.Buffer
	tarInto(t, &buf, hdrs, body)
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
