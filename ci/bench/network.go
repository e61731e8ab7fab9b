package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/hostd"
	"github.com/agentbox/agentbox/hostd/egress"
	"github.com/agentbox/agentbox/hostd/netns"
	"github.com/agentbox/agentbox/internal/nettest"
)

// benchTB runs nettest outside `go test`: failures panic, cleanups run in
// reverse at the end.
type benchTB struct{ cleanups []func() }

func (b *benchTB) Helper()                      {}
func (b *benchTB) Fatal(args ...any)            { panic(fmt.Sprint(args...)) }
func (b *benchTB) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }
func (b *benchTB) Errorf(f string, args ...any) { fmt.Fprintf(os.Stderr, f+"\n", args...) }
func (b *benchTB) Cleanup(f func())             { b.cleanups = append(b.cleanups, f) }
func (b *benchTB) done() {
	for i := len(b.cleanups) - 1; i >= 0; i-- {
		b.cleanups[i]()
	}
}

// benchNetwork measures the egress proxy without a VM: the upstream runs in
// a namespace of its own (internal/nettest); the client dials the proxy's
// listener from a second namespace, where the proxy's sockets were opened,
// exactly as a guest reaches them (minus the tap). The baseline is the same
// request from the host straight to the upstream.
func benchNetwork(t *table, n int) (err error) {
	tb := &benchTB{}
	defer tb.done()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("network bench: %v", r)
		}
	}()
	up := nettest.NewWithoutSinks(tb)
	clientNS := "abbench-" + strconv.Itoa(os.Getpid())
	var ls egress.Listeners
	err = netns.InNew(clientNS, func() error {
		if err := loUp(); err != nil {
			return err
		}
		return listenProxy(&ls)
	})
	tb.Cleanup(func() { _ = netns.Remove(clientNS) })
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "ab-bench-ca-")
	if err != nil {
		return err
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	ca, err := egress.LoadOrCreateCA(dir)
	if err != nil {
		return err
	}
	p, err := egress.New(egress.Options{CA: ca, Hosts: up.Hosts(), UpstreamRootsPEM: up.CA.PEM, AnswerAddr: net.IPv4(127, 0, 0, 1),
		Secrets: staticSecret("bench-token"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	pol := egress.Policy{Mode: egress.ModeProxy, AllowDomains: []string{"allowed.test"},
		Inject: []egress.InjectRule{{Host: "inject.test", Header: "Authorization", Value: "Bearer {{secret:tok}}"}}}
	if err := p.Attach("bench", pol, ls); err != nil {
		return err
	}
	defer p.Detach("bench")
	roots := up.CA.Pool()
	roots.AppendCertsFromPEM(ca.CertPEM())
	direct := httpClient(roots, func(ctx context.Context, addr string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", net.JoinHostPort(up.IP.String(), "443"))
	})
	viaProxy := httpClient(roots, func(ctx context.Context, addr string) (net.Conn, error) {
		var c net.Conn
		err := netns.Do(clientNS, func() (err error) {
			c, err = (&net.Dialer{}).DialContext(ctx, "tcp", "127.0.0.1:443")
			return err
		})
		return c, err
	})
	return measureProxy(t, n, direct, viaProxy)
}

func listenProxy(ls *egress.Listeners) error {
	var err error
	if ls.TCP, err = net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 443}); err != nil {
		return err
	}
	if ls.DNSTCP, err = net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}); err != nil {
		return err
	}
	ls.DNSUDP, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53})
	return err
}

func httpClient(roots *x509.CertPool, dial func(ctx context.Context, addr string) (net.Conn, error)) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		DialContext:       func(ctx context.Context, _, addr string) (net.Conn, error) { return dial(ctx, addr) },
	}, Timeout: time.Minute}
}

func get(c *http.Client, url string) (int64, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", url, resp.Status)
	}
	return n, err
}

func measureProxy(t *table, n int, direct, viaProxy *http.Client) error {
	// Interleaved, so that the load of a shared machine falls on all three.
	var base, spliced, intercepted []time.Duration
	for i := 0; i < n; i++ {
		for _, m := range []struct {
			c   *http.Client
			url string
			d   *[]time.Duration
		}{{direct, "https://allowed.test/", &base}, {viaProxy, "https://allowed.test/", &spliced}, {viaProxy, "https://inject.test/", &intercepted}} {
			start := time.Now()
			if _, err := get(m.c, m.url); err != nil {
				return err
			}
			*m.d = append(*m.d, time.Since(start))
		}
	}
	b50 := pct(base, 0.5)
	t.add(fmt.Sprintf("HTTPS GET, new connection, direct (no proxy), p50 of %d", n), ms(b50), "baseline, same run")
	t.add("HTTPS GET through the proxy, SNI splice, p50", ms(pct(spliced, 0.5)), fmt.Sprintf("%.2f× direct", float64(pct(spliced, 0.5))/float64(b50)))
	t.add("HTTPS GET through the proxy, intercepted + header injected, p50", ms(pct(intercepted, 0.5)),
		fmt.Sprintf("%.2f× direct (upstream connection reused)", float64(pct(intercepted, 0.5))/float64(b50)))
	const size = 64 << 20
	for _, c := range []struct {
		name   string
		client *http.Client
		url    string
	}{
		{"64 MiB HTTPS download, direct", direct, "https://allowed.test/bytes?n="},
		{"64 MiB HTTPS download through the proxy, SNI splice", viaProxy, "https://allowed.test/bytes?n="},
		{"64 MiB HTTPS download through the proxy, intercepted", viaProxy, "https://inject.test/bytes?n="},
	} {
		start := time.Now()
		got, err := get(c.client, c.url+strconv.Itoa(size))
		if err != nil {
			return err
		}
		if got != size {
			return fmt.Errorf("%s: got %d bytes", c.name, got)
		}
		d := time.Since(start)
		t.add(c.name, fmt.Sprintf("%.0f MiB/s", 64/d.Seconds()), ms(d))
	}
	return nil
}

func loUp() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	return netlink.LinkSetUp(lo)
}

type staticSecret string

func (s staticSecret) SecretValue(context.Context, string) ([]byte, error) { return []byte(s), nil }

// benchGuestDownload measures a 64 MiB HTTPS download from inside a sandbox
// (curl in the guest, through virtio-net, the tap and the proxy) from the
// test upstream, spliced by SNI and intercepted, on a hostd of its own.
func benchGuestDownload(ctx context.Context, t *table) (err error) {
	tb := &benchTB{}
	defer tb.done()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("guest network bench: %v", r)
		}
	}()
	up := nettest.NewWithoutSinks(tb)
	caFile := filepath.Join(os.TempDir(), "ab-bench-upstream-ca-"+strconv.Itoa(os.Getpid())+".pem")
	if err := os.WriteFile(caFile, up.CA.PEM, 0o644); err != nil {
		return err
	}
	defer os.Remove(caFile)
	c, stop, err := startHostdWith(ctx, func(cfg *hostd.Config) { cfg.EgressHosts, cfg.EgressUpstreamCA = up.Hosts(), caFile })
	if err != nil {
		return err
	}
	defer stop()
	if _, err := c.CreateSecret(ctx, "tok", "bench-token"); err != nil {
		return err
	}
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 512, Network: &client.NetworkPolicyInput{
		AllowDomains: []string{"allowed.test"},
		Inject:       []client.InjectRule{{Host: "inject.test", Header: "Authorization", Value: "Bearer {{secret:tok}}"}},
	}})
	if err != nil {
		return err
	}
	defer c.DeleteSandbox(context.WithoutCancel(ctx), sb.ID)
	if err := c.WriteFile(ctx, sb.ID, "/root/up.pem", 0o644, bytes.NewReader(up.CA.PEM)); err != nil {
		return err
	}
	// Spliced TLS ends at the upstream (its own CA); intercepted TLS at the
	// proxy (its CA is in the guest's system store).
	for _, m := range []struct{ name, url, ca string }{
		{"64 MiB HTTPS download in the guest (curl), SNI splice", "https://allowed.test/bytes?n=67108864", "/root/up.pem"},
		{"64 MiB HTTPS download in the guest (curl), intercepted", "https://inject.test/bytes?n=67108864", "/etc/ssl/certs/ca-certificates.crt"},
	} {
		r, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"curl", "-sS", "-m", "120", "--cacert", m.ca, "-o", "/dev/null",
			"-w", "%{size_download} %{time_total}", m.url}})
		if err != nil {
			return err
		}
		var size, secs float64
		if _, err := fmt.Sscan(r.Stdout, &size, &secs); err != nil || size != 64<<20 || r.ExitCode != 0 {
			return fmt.Errorf("%s: %q %q (exit %d)", m.name, r.Stdout, r.Stderr, r.ExitCode)
		}
		t.add(m.name, fmt.Sprintf("%.0f MiB/s", 64/secs), fmt.Sprintf("%.0f ms (TCG guest)", secs*1000))
	}
	return nil
}
