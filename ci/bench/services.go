package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/client"
)

const svcPort = 9000

// benchServices measures service URLs: a small request's latency against
// the same request made inside the guest (curl to localhost), and the
// throughput of a 64 MiB response, against curl inside the guest too.
func benchServices(ctx context.Context, c *client.Client, sb client.Sandbox, t *table, n int) error {
	n = min(n, 100)
	if err := startGuestsvc(ctx, c, sb.ID); err != nil {
		return err
	}
	pa, err := c.PortAccess(ctx, sb.ID, svcPort)
	if err != nil {
		return err
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	fresh := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(path string, w io.Writer) error { return fetch(ctx, hc, pa, path, w) }
	if err := get("ping", io.Discard); err != nil { // warm the connection
		return err
	}
	via, err := timeGets(n, func() error { return get("ping", io.Discard) })
	if err != nil {
		return err
	}
	viaFresh, err := timeGets(n, func() error { return fetch(ctx, fresh, pa, "ping", io.Discard) })
	if err != nil {
		return err
	}
	direct, err := guestCurlTimes(ctx, c, sb.ID, n)
	if err != nil {
		return err
	}
	goDirect, err := guestGoTimes(ctx, c, sb.ID, n)
	if err != nil {
		return err
	}
	v50, f50, d50, g50 := pct(via, 0.5), pct(viaFresh, 0.5), pct(direct, 0.5), pct(goDirect, 0.5)
	t.add(fmt.Sprintf("HTTP GET via service URL (path form, keep-alive), p50 / p99 of %d", n), ms(v50)+" / "+ms(pct(via, 0.99)), "")
	t.add("same, a new connection per request, p50", ms(f50), "new port-forward stream and guest TCP connection")
	t.add("same GET by curl inside the guest to 127.0.0.1, p50", ms(d50), "baseline, same run (curl time_total, new connection)")
	t.add("service URL ÷ in-guest curl GET (p50; keep-alive / new connection)", fmt.Sprintf("%.1f× / %.1f×", float64(v50)/float64(d50), float64(f50)/float64(d50)), "")
	t.add("same GET by a keep-alive Go client inside the guest, p50", ms(g50), "baseline, same run")
	t.add("service URL (keep-alive) ÷ in-guest Go client (p50)", fmt.Sprintf("%.1f×", float64(v50)/float64(g50)), "")
	const size = 64 << 20
	if err := get("bytes?n="+strconv.Itoa(8<<20), io.Discard); err != nil { // warm up
		return err
	}
	start := time.Now()
	if err := get("bytes?n="+strconv.Itoa(size), io.Discard); err != nil {
		return err
	}
	d := time.Since(start)
	inGuest, err := guestCurlSpeed(ctx, c, sb.ID, size)
	if err != nil {
		return err
	}
	viaMiBs := float64(size>>20) / d.Seconds()
	t.add("64 MiB response via service URL", fmt.Sprintf("%.1f MiB/s", viaMiBs), ms(d))
	t.add("64 MiB response by curl inside the guest", fmt.Sprintf("%.1f MiB/s", inGuest), "baseline, same run")
	t.add("service URL ÷ in-guest throughput", fmt.Sprintf("%.2f×", viaMiBs/inGuest), "")
	return nil
}

// timeGets times n calls of get.
func timeGets(n int, get func() error) ([]time.Duration, error) {
	var out []time.Duration
	for i := 0; i < n; i++ {
		start := time.Now()
		if err := get(); err != nil {
			return nil, err
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

// fetch GETs path under pa's path-based URL with the access token.
func fetch(ctx context.Context, hc *http.Client, pa client.PortAccess, path string, w io.Writer) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, pa.PathURL+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-Agentbox-Token", pa.Token)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

// startGuestsvc builds ci/guestsvc, copies it into the sandbox and starts it.
func startGuestsvc(ctx context.Context, c *client.Client, id string) error {
	dir, err := os.MkdirTemp("", "ab-bench-svc-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "guestsvc")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./ci/guestsvc")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build guestsvc: %w\n%s", err, out)
	}
	f, err := os.Open(bin)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := c.WriteFile(ctx, id, "/usr/local/bin/guestsvc", 0o755, f); err != nil {
		return err
	}
	if _, err := c.ExecBackground(ctx, id, client.ExecRequest{Cmd: []string{"/usr/local/bin/guestsvc", "-listen", "127.0.0.1:" + strconv.Itoa(svcPort)}}); err != nil {
		return err
	}
	wait := fmt.Sprintf("for i in $(seq 300); do curl -sf http://127.0.0.1:%d/ping >/dev/null && exit 0; sleep 0.1; done; exit 1", svcPort)
	r, err := c.Exec(ctx, id, client.ExecRequest{Cmd: []string{"sh", "-c", wait}})
	if err == nil && r.ExitCode != 0 {
		err = fmt.Errorf("guestsvc did not start: %s", r.Stderr)
	}
	return err
}

// guestCurlTimes runs n GETs of /ping with curl in the guest.
func guestCurlTimes(ctx context.Context, c *client.Client, id string, n int) ([]time.Duration, error) {
	script := fmt.Sprintf(`for i in $(seq %d); do curl -s -o /dev/null -w '%%{time_total}\n' http://127.0.0.1:%d/ping; done`, n, svcPort)
	r, err := c.Exec(ctx, id, client.ExecRequest{Cmd: []string{"sh", "-c", script}})
	if err != nil {
		return nil, err
	}
	var out []time.Duration
	for _, f := range strings.Fields(r.Stdout) {
		s, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return nil, fmt.Errorf("curl time %q: %w", f, err)
		}
		out = append(out, time.Duration(s*float64(time.Second)))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no curl timings: %q", r.Stderr)
	}
	return out, nil
}

// guestGoTimes runs n keep-alive GETs of /ping with guestsvc -get in the guest.
func guestGoTimes(ctx context.Context, c *client.Client, id string, n int) ([]time.Duration, error) {
	r, err := c.Exec(ctx, id, client.ExecRequest{Cmd: []string{"/usr/local/bin/guestsvc", "-n", strconv.Itoa(n),
		"-get", fmt.Sprintf("http://127.0.0.1:%d/ping", svcPort)}})
	if err != nil {
		return nil, err
	}
	var out []time.Duration
	for _, f := range strings.Fields(r.Stdout) {
		ns, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("guestsvc time %q: %w", f, err)
		}
		out = append(out, time.Duration(ns))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no guestsvc timings: %q", r.Stderr)
	}
	return out, nil
}

// guestCurlSpeed is curl's download speed of size bytes in the guest, MiB/s.
func guestCurlSpeed(ctx context.Context, c *client.Client, id string, size int) (float64, error) {
	script := fmt.Sprintf(`curl -s -o /dev/null -w '%%{speed_download}' 'http://127.0.0.1:%d/bytes?n=%d'`, svcPort, size)
	r, err := c.Exec(ctx, id, client.ExecRequest{Cmd: []string{"sh", "-c", script}})
	if err != nil {
		return 0, err
	}
	bps, err := strconv.ParseFloat(strings.TrimSpace(r.Stdout), 64)
	if err != nil || bps <= 0 {
		return 0, fmt.Errorf("curl speed %q: %v", r.Stdout, err)
	}
	return bps / (1 << 20), nil
}
