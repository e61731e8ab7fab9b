//go:build vm

package hostd_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/client/dockerfile"
	"github.com/agentbox/agentbox/hostd"
	"github.com/agentbox/agentbox/internal/nettest"
	"github.com/agentbox/agentbox/vmm/vmmtest"
)

// dockerImage is the tag the test loads its busybox image as.
const dockerImage = "agentbox-test/busybox:1"

// TestDockerInSandbox runs Docker in a sandbox of the docker template:
// dockerd is already running, an image made on the host is loaded, run and
// built on, a container's traffic goes through the egress proxy like the
// guest's own, and Docker keeps working across pause/resume and in a fork
// with its own daemon state.
func TestDockerInSandbox(t *testing.T) {
	layout, layouts := dockerLayout(t)
	up := nettest.New(t)
	c := startDockerHostd(t, up, layouts)
	ctx := context.Background()
	buildDockerTemplate(t, c, layout)

	t0 := time.Now()
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: dockerTemplate,
		Network: &client.NetworkPolicyInput{AllowDomains: []string{"allowed.test"}}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	defer c.DeleteSandbox(ctx, sb.ID)
	// Running at once: no retry, the first docker call must succeed.
	info := docker(t, c, sb.ID, "info", "--format", "{{.Driver}} cgroup v{{.CgroupVersion}}")
	t.Logf("sandbox created and dockerd answered in %v", time.Since(t0).Round(time.Millisecond))
	// overlay2 (not the vfs fallback): the overlay module was loaded.
	if want := "overlay2 cgroup v2\n"; info != want {
		t.Errorf("docker info: %q, want %q", info, want)
	}

	var tar bytes.Buffer
	ref, err := name.NewTag(dockerImage)
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.Write(ref, plainBusyboxImage(t), &tar); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteFile(ctx, sb.ID, "/root/busybox.tar", 0o644, &tar); err != nil {
		t.Fatal(err)
	}
	if out := docker(t, c, sb.ID, "load", "-i", "/root/busybox.tar"); !strings.Contains(out, dockerImage) {
		t.Fatalf("docker load: %q, want the image's tag", out)
	}
	t1 := time.Now()
	if out := docker(t, c, sb.ID, "run", "--rm", dockerImage, "echo", "hi"); out != "hi\n" {
		t.Fatalf("docker run: %q, want hi", out)
	}
	t.Logf("docker run --rm echo hi: %v", time.Since(t1).Round(time.Millisecond))

	t.Run("build", func(t *testing.T) { checkDockerBuild(t, c, sb.ID) })
	t.Run("egress through the proxy", func(t *testing.T) { checkDockerEgress(t, c, sb.ID) })
	t.Run("pause and resume", func(t *testing.T) {
		if _, err := c.Pause(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Resume(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		if out := docker(t, c, sb.ID, "run", "--rm", dockerImage, "echo", "resumed"); out != "resumed\n" {
			t.Fatalf("after resume: %q", out)
		}
	})
	t.Run("fork", func(t *testing.T) { checkDockerFork(t, c, sb.ID) })
}

// docker runs the docker CLI in the sandbox and returns its stdout; a
// non-zero exit fails the test.
func docker(t *testing.T, c *client.Client, id string, args ...string) string {
	t.Helper()
	r := dockerResult(t, c, id, args...)
	if r.ExitCode != 0 {
		t.Fatalf("docker %v: exit %d: %s%s", args, r.ExitCode, r.Stdout, r.Stderr)
	}
	return r.Stdout
}

func dockerResult(t *testing.T, c *client.Client, id string, args ...string) client.ExecResult {
	t.Helper()
	// Generous: a docker run took 80 s under TCG on a loaded 2-core machine.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r, err := c.Exec(ctx, id, client.ExecRequest{Cmd: append([]string{"docker"}, args...),
		Env: map[string]string{"DOCKER_BUILDKIT": "0"}})
	if err != nil {
		t.Fatalf("exec docker %v: %v", args, err)
	}
	return r
}

// checkDockerBuild builds a two-line Dockerfile FROM the loaded image.
func checkDockerBuild(t *testing.T, c *client.Client, id string) {
	ctx := context.Background()
	df := "FROM " + dockerImage + "\nRUN echo built-in-docker > /built\n"
	if err := c.WriteFile(ctx, id, "/root/ctx/Dockerfile", 0o644, strings.NewReader(df)); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	docker(t, c, id, "build", "-q", "-t", "agentbox-test/built:1", "/root/ctx")
	t.Logf("docker build: %v", time.Since(t0).Round(time.Millisecond))
	if out := docker(t, c, id, "run", "--rm", "agentbox-test/built:1", "cat", "/built"); out != "built-in-docker\n" {
		t.Fatalf("the built image: %q", out)
	}
}

// checkDockerEgress: a container on Docker's bridge resolves names and
// reaches the allowed upstream through the guest's resolver and proxy, and
// a denied host is refused. busybox's nslookup has its own resolver; the
// HTTP request is written with nc to the address it gave (static busybox's
// wget crashes without the NSS modules the image does not have).
func checkDockerEgress(t *testing.T, c *client.Client, id string) {
	r := dockerResult(t, c, id, "run", "--rm", dockerImage, "busybox", "nslookup", "allowed.test")
	addr := lastAddress(r.Stdout)
	if r.ExitCode != 0 || addr == "" {
		t.Fatalf("nslookup allowed.test in a container: exit %d, %q %q", r.ExitCode, r.Stdout, r.Stderr)
	}
	if out := containerGet(t, c, id, addr, "allowed.test", "/from-container"); !strings.Contains(out, "hello from upstream allowed.test") {
		t.Errorf("allowed.test from a container: %q", out)
	}
	if r := dockerResult(t, c, id, "run", "--rm", dockerImage, "busybox", "nslookup", "denied.test"); r.ExitCode == 0 && lastAddress(r.Stdout) != "" {
		t.Errorf("denied.test resolved in a container: %q", r.Stdout)
	}
	if out := containerGet(t, c, id, "10.0.0.1", "denied.test", "/"); !strings.HasPrefix(out, "HTTP/1.0 403") {
		t.Errorf("denied.test at the proxy's address from a container: %q, want a 403", out)
	}
}

// containerGet sends GET path with the Host header host to addr:80 from a
// container and returns the raw answer. nc's input stays open a while: a
// half-closed connection is a client gone to Go's HTTP server, which
// cancels the request; the server closes after its HTTP/1.0 answer.
func containerGet(t *testing.T, c *client.Client, id, addr, host, path string) string {
	t.Helper()
	req := "GET " + path + " HTTP/1.0\\r\\nHost: " + host + "\\r\\n\\r\\n"
	return docker(t, c, id, "run", "--rm", dockerImage, "sh", "-c", "(printf '"+req+"'; busybox sleep 30) | busybox nc -w 30 "+addr+" 80")
}

// lastAddress is the last "Address: A" of nslookup's answer section (the
// first is the server's), or "".
func lastAddress(out string) string {
	_, answer, ok := strings.Cut(out, "Name:")
	if !ok {
		return ""
	}
	addr := ""
	for _, l := range strings.Split(answer, "\n") {
		if a, ok := strings.CutPrefix(strings.TrimSpace(l), "Address:"); ok {
			addr = strings.TrimSpace(a)
		}
	}
	return addr
}

// checkDockerFork: a fork runs containers on its own daemon; a container
// made in the fork does not exist in the parent.
func checkDockerFork(t *testing.T, c *client.Client, id string) {
	ctx := context.Background()
	forks, err := c.Fork(ctx, id, 1)
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	f := forks[0]
	defer c.DeleteSandbox(ctx, f.ID)
	if out := docker(t, c, f.ID, "run", "--name", "made-in-fork", dockerImage, "echo", "forked"); out != "forked\n" {
		t.Fatalf("docker run in the fork: %q", out)
	}
	if out := docker(t, c, f.ID, "ps", "-a", "-q", "--filter", "name=made-in-fork"); strings.TrimSpace(out) == "" {
		t.Errorf("the fork's container is not in the fork's daemon")
	}
	if out := docker(t, c, id, "ps", "-a", "-q", "--filter", "name=made-in-fork"); strings.TrimSpace(out) != "" {
		t.Errorf("the fork's container shows in the parent: %q", out)
	}
}

// dockerTemplate is the template the test builds.
const dockerTemplate = "docker"

// startDockerHostd runs hostd with networking (the upstream's names and CA)
// and the template layouts' directory as an image import directory.
func startDockerHostd(t *testing.T, up *nettest.Upstream, layouts string) *client.Client {
	t.Helper()
	data := vmmtest.ShortTempDir(t)
	netDataDirsMu.Lock()
	netDataDirs = append(netDataDirs, data)
	netDataDirsMu.Unlock()
	caFile := filepath.Join(data, "upstream-ca.pem")
	if err := os.WriteFile(caFile, up.CA.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	u, stop := runHostd(t, data, func(cfg *hostd.Config) {
		cfg.EgressHosts, cfg.EgressUpstreamCA = up.Hosts(), caFile
		cfg.Images.ImportDirs = append(cfg.Images.ImportDirs, layouts)
	})
	t.Cleanup(stop)
	c, err := client.New(u, testKey)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// buildDockerTemplate builds the docker template as a user does: the
// Dockerfile of images/templates/docker FROM the layout `make
// template-docker` made, whose last step starts dockerd.
func buildDockerTemplate(t *testing.T, c *client.Client, layout string) {
	t.Helper()
	var out bytes.Buffer
	t0 := time.Now()
	_, err := dockerfile.Build(context.Background(), c, dockerTemplate, "../images/templates/docker/Dockerfile", dockerfile.BuildOptions{
		BuildArgs: map[string]string{"LAYOUT": layout}, Image: client.ImageSource{MemoryMiB: 1024}, Out: &out, Err: &out})
	if err != nil {
		t.Fatalf("build the docker template: %v\n%s", err, out.String())
	}
	t.Logf("docker template built in %v:\n%s", time.Since(t0).Round(time.Millisecond), out.String())
}

// dockerLayout is the docker template's OCI layout, which must have been
// built (make template-docker).
func dockerLayout(t *testing.T) (layout, dir string) {
	t.Helper()
	dir = filepath.Join(vmmtest.CacheDir(), "templates")
	layout = filepath.Join(dir, "docker")
	if _, err := os.Stat(filepath.Join(layout, "index.json")); err != nil {
		t.Fatalf("the docker template's layout is missing (run `make template-docker`): %v", err)
	}
	return layout, dir
}

// plainBusyboxImage is busyboxImage without the config the image-template
// test gives it (Entrypoint sh -c, Cmd, USER 1000, WorkingDir): `docker run
// IMG echo hi` then runs echo itself, as root, like a plain busybox image.
func plainBusyboxImage(t *testing.T) v1.Image {
	t.Helper()
	img := busyboxImage(t)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Config = v1.Config{Env: []string{"PATH=/bin"}}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}
