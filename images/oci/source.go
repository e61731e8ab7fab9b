package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/docker/cli/cli/config"
	"github.com/docker/cli/cli/config/configfile"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Kinds of image source.
const (
	KindRegistry = "registry"
	KindLayout   = "oci-layout"
	KindTarball  = "tarball"
)

// ErrPlainHTTP refuses plain HTTP to a registry that is neither on
// loopback nor named insecure.
var ErrPlainHTTP = errors.New("oci: plain HTTP refused")

// ErrBadRef refuses a reference that names no image.
var ErrBadRef = errors.New("oci: bad image reference")

// ErrRegistry wraps what a registry refused (an unknown reference, bad
// credentials) or a registry that could not be reached.
var ErrRegistry = errors.New("oci: registry")

// ErrRegistryAuth is a registry that refused the credentials given (or
// wants some and got none): the request's to fix, not the registry's.
var ErrRegistryAuth = errors.New("oci: registry refused the credentials")

// SourceOptions say how to reach an image.
type SourceOptions struct {
	// Insecure names registries ("host:port") that may be reached over
	// plain HTTP; loopback registries always may.
	Insecure []string
	// Keychain gives credentials (nil: anonymous).
	Keychain authn.Keychain
	// LocalRoots, if set, are the directories under which a local path
	// (an OCI layout or a tarball) may be; with none, local paths are
	// refused (a remote caller must not read the host's files).
	LocalRoots []string
	// Transport is the base HTTP transport (nil: http.DefaultTransport).
	Transport http.RoundTripper
	// Progress, if set, is told of bytes pulled from a registry.
	Progress func(Progress)
}

// Image is an opened image.
type Image struct {
	v1.Image
	Kind string
	// Ref is the reference as given.
	Ref string
}

// Open opens ref: an existing local directory is an OCI layout, an
// existing file a `docker save` tarball, anything else a registry
// reference (by tag or digest).
func Open(ctx context.Context, ref string, opts SourceOptions) (*Image, error) {
	if local, ok, err := localPath(ref, opts.LocalRoots); err != nil {
		return nil, err
	} else if ok {
		return openLocal(local, ref)
	}
	return openRemote(ctx, ref, opts)
}

// localPath reports whether ref is a local path and, if so, that it lies
// under one of roots.
func localPath(ref string, roots []string) (string, bool, error) {
	if !strings.HasPrefix(ref, "/") && !strings.HasPrefix(ref, ".") {
		return "", false, nil
	}
	abs, err := filepath.Abs(ref)
	if err != nil {
		return "", false, err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", false, fmt.Errorf("%w: %s: %w", ErrBadRef, ref, err)
	}
	for _, r := range roots {
		rr, err := filepath.EvalSymlinks(r)
		if err != nil {
			continue
		}
		if rel, err := filepath.Rel(rr, real); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
			return real, true, nil
		}
	}
	return "", false, fmt.Errorf("%w: local path %s is not under a directory hostd imports from", ErrBadRef, ref)
}

func openLocal(path, ref string) (*Image, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRef, err)
	}
	if fi.IsDir() {
		img, err := fromLayout(path)
		if err != nil {
			return nil, fmt.Errorf("%w: OCI layout %s: %w", ErrNotImage, ref, err)
		}
		return &Image{Image: img, Kind: KindLayout, Ref: ref}, nil
	}
	img, err := tarball.ImageFromPath(path, nil)
	if err == nil {
		_, err = img.ConfigFile() // a tarball is read lazily: check it now
	}
	if err != nil {
		return nil, fmt.Errorf("%w: tarball %s: %w", ErrNotImage, ref, err)
	}
	return &Image{Image: img, Kind: KindTarball, Ref: ref}, nil
}

// fromLayout returns the layout's image: its only one, or the one for
// linux/amd64 of its index.
func fromLayout(dir string) (v1.Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, err
	}
	for depth := 0; depth < 2; depth++ {
		im, err := idx.IndexManifest()
		if err != nil {
			return nil, err
		}
		var pick *v1.Descriptor
		for i, d := range im.Manifests {
			if pick == nil || (d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == "amd64") {
				pick = &im.Manifests[i]
			}
		}
		if pick == nil {
			return nil, errors.New("no manifest in index.json")
		}
		if pick.MediaType.IsImage() {
			return idx.Image(pick.Digest)
		}
		if !pick.MediaType.IsIndex() {
			return nil, fmt.Errorf("unsupported media type %s", pick.MediaType)
		}
		if idx, err = idx.ImageIndex(pick.Digest); err != nil {
			return nil, err
		}
	}
	return nil, errors.New("indexes nested too deep")
}

func openRemote(ctx context.Context, ref string, opts SourceOptions) (*Image, error) {
	nopts := []name.Option{}
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRef, err)
	}
	for _, h := range opts.Insecure {
		if r.Context().RegistryStr() == h {
			nopts = append(nopts, name.Insecure)
		}
	}
	if r, err = name.ParseReference(ref, nopts...); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRef, err)
	}
	kc := opts.Keychain
	if kc == nil {
		kc = authn.NewMultiKeychain()
	}
	pt := &policyTransport{base: opts.Transport, insecure: opts.Insecure}
	if pt.base == nil {
		pt.base = http.DefaultTransport
	}
	img, err := remote.Image(r, remote.WithContext(ctx), remote.WithAuthFromKeychain(kc), remote.WithTransport(pt),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"}))
	if err != nil {
		return nil, registryError(ref, err)
	}
	if opts.Progress != nil {
		total := int64(0)
		if m, err := img.Manifest(); err == nil {
			for _, l := range m.Layers {
				total += l.Size
			}
		}
		pt.onBlob = func(n int64) { opts.Progress(Progress{Phase: PhasePull, Current: n, Total: total}) }
	}
	return &Image{Image: img, Kind: KindRegistry, Ref: ref}, nil
}

// policyTransport refuses plain HTTP except to loopback or the insecure
// registries, and counts the bytes of blobs read.
type policyTransport struct {
	base     http.RoundTripper
	insecure []string
	read     atomic.Int64
	onBlob   func(total int64)
}

func (t *policyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "http" && !t.plainOK(req.URL) {
		return nil, fmt.Errorf("%w to %s: use HTTPS, or name it an insecure registry", ErrPlainHTTP, req.URL.Host)
	}
	resp, err := t.base.RoundTrip(req)
	if err == nil && t.onBlob != nil && strings.Contains(req.URL.Path, "/blobs/") {
		resp.Body = &countingBody{ReadCloser: resp.Body, t: t}
	}
	return resp, err
}

func (t *policyTransport) plainOK(u interface{ Hostname() string }) bool {
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	for _, h := range t.insecure {
		hh, _, err := net.SplitHostPort(h)
		if err != nil {
			hh = h
		}
		if hh == host {
			return true
		}
	}
	return false
}

type countingBody struct {
	io.ReadCloser
	t *policyTransport
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.t.onBlob(b.t.read.Add(int64(n)))
	}
	return n, err
}

// StaticKeychain gives one registry's credentials.
func StaticKeychain(registry, user, password string) authn.Keychain {
	return staticKeychain{registry: registry, auth: authn.FromConfig(authn.AuthConfig{Username: user, Password: password})}
}

type staticKeychain struct {
	registry string
	auth     authn.Authenticator
}

func (k staticKeychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	if r.RegistryStr() == k.registry {
		return k.auth, nil
	}
	return authn.Anonymous, nil
}

// DockerConfigKeychain reads credentials from a Docker config file (its
// "auths" and credential helpers).
func DockerConfigKeychain(path string) (authn.Keychain, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cf, err := config.LoadFromReader(f)
	if err != nil {
		return nil, fmt.Errorf("docker config %s: %w", path, err)
	}
	return dockerKeychain{cf}, nil
}

type dockerKeychain struct{ cf *configfile.ConfigFile }

func (k dockerKeychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	key := r.RegistryStr()
	if key == name.DefaultRegistry {
		key = authn.DefaultAuthKey
	}
	ac, err := k.cf.GetAuthConfig(key)
	if err != nil {
		return nil, err
	}
	if ac.Username == "" && ac.Auth == "" && ac.IdentityToken == "" && ac.RegistryToken == "" {
		return authn.Anonymous, nil
	}
	return authn.FromConfig(authn.AuthConfig{Username: ac.Username, Password: ac.Password, Auth: ac.Auth,
		IdentityToken: ac.IdentityToken, RegistryToken: ac.RegistryToken}), nil
}

// Keychain gives registry credentials (go-containerregistry's authn).
type Keychain = authn.Keychain

// RegistryOf returns the registry ("host:port") of a registry reference.
func RegistryOf(ref string) (string, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrBadRef, err)
	}
	return r.Context().RegistryStr(), nil
}

// LocalPath resolves p, an absolute or ./relative path, and returns it if
// it is under one of roots (symlinks resolved), else an error wrapping
// ErrBadRef. Other hostd inputs on its machine (a template's kernel) use
// the same import directories as images.
func LocalPath(p string, roots []string) (string, error) {
	real, ok, err := localPath(p, roots)
	if err == nil && !ok {
		err = fmt.Errorf("%w: %s is not an absolute path", ErrBadRef, p)
	}
	return real, err
}
