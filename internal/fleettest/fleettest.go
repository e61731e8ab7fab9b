// Package fleettest starts a fleet on one machine for a test (issue 39): a
// real PostgreSQL (internal/pgserver) listening on loopback and on a
// bridge the kit makes in the root network namespace; N hostds, each in a
// network namespace of its own joined to the bridge by a veth pair, with
// its own address, data directory (hence its own cgroup parent, sandbox
// namespace names and VMM uid claims) and the same port; and M control-
// plane replicas (`agentbox gateway`) in the root namespace on loopback.
// It runs the binaries built from this checkout (Binaries) and records
// every process it starts; Close (run by t.Cleanup with New) kills them by
// pid — hostds and their VMMs — and removes the namespaces, links,
// bridge and directories, also after a failure.
//
// Hosts in fleet mode (Options.Fleet) get --fleet-db, --fleet-host,
// --fleet-advertise, --fleet-secret-file, --fleet-lease-ttl and
// --fleet-max-sandboxes; without it they are plain hostds, reached with
// HostKey.
//
// The kit needs root (namespaces, links, cgroups), ip(8), nsenter(1) and
// Debian's postgresql; New skips the test where one is missing.
package fleettest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/pgserver"
)

// HostPort is the port every hostd listens on, at its own address.
const HostPort = 7070

// Options configure a fleet.
type Options struct {
	// Hosts and Gateways are how many hostds and control-plane replicas
	// to start (Gateways may be 0: hostds only).
	Hosts, Gateways int
	// Fleet starts the hostds in fleet mode (the --fleet-* flags);
	// otherwise they are independent hostds.
	Fleet bool
	// LeaseTTL is the hosts' lease (default 10 s).
	LeaseTTL time.Duration
	// MaxSandboxes caps each host's sandboxes (--fleet-max-sandboxes;
	// 0: none).
	MaxSandboxes int
	// SnapshotStore gives the fleet a snapshot store (an s3test bucket on
	// the bridge address) and starts hosts and gateways with
	// --snapshot-store (portable snapshots, issue 40).
	SnapshotStore bool
	// HostArgs and GatewayArgs are more flags for every hostd and gateway
	// (after the kit's own: a later flag wins).
	HostArgs, GatewayArgs []string
	// Dir holds everything the fleet writes; "" is a new temporary
	// directory, removed by Close.
	Dir string
	// Logf, if set, receives the kit's progress.
	Logf func(format string, args ...any)
}

// Fleet is a running fleet.
type Fleet struct {
	o                 Options
	bin, dir          string
	tempDir           bool
	net               *network
	netRemoved        bool
	pg                *pgserver.Server
	secretFile        string
	adminKey, hostKey string
	adminKeyFile      string
	gwPorts           []int
	bucket            *bucket

	mu       sync.Mutex
	hosts    []*proc // nil: not running
	gateways []*proc
	started  []int // every pid the kit started or saw (VMMs)
	netHosts int   // namespaces made
}

// New starts a fleet for t and closes it in t's Cleanup; it skips t where
// the machine cannot run one (not root, no ip or nsenter, no PostgreSQL).
func New(t testing.TB, o Options) *Fleet {
	t.Helper()
	if why := missing(); why != "" {
		t.Skip("fleettest: " + why)
	}
	if o.Logf == nil {
		o.Logf = t.Logf
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	f, err := Start(ctx, o)
	if errors.Is(err, pgserver.ErrNoPostgres) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			f.logTails(t.Logf)
		}
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	})
	return f
}

// missing names what the machine lacks to run a fleet ("" if nothing).
func missing() string {
	if os.Geteuid() != 0 {
		return "needs root (network namespaces, links, cgroups)"
	}
	for _, b := range []string{"ip", "nsenter"} {
		if _, err := exec.LookPath(b); err != nil {
			return "needs " + b
		}
	}
	return ""
}

// Start starts a fleet; Close stops it. On error nothing is left behind.
func Start(ctx context.Context, o Options) (_ *Fleet, err error) {
	if o.LeaseTTL == 0 {
		o.LeaseTTL = 10 * time.Second
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	f := &Fleet{o: o, dir: o.Dir, hosts: make([]*proc, o.Hosts), gateways: make([]*proc, o.Gateways),
		adminKey: "ab_fleet-admin-" + randHex(16), hostKey: "ab_fleet-host-" + randHex(16)}
	if f.bin, err = Binaries(ctx); err != nil {
		return nil, err
	}
	if f.dir == "" {
		// Short: QEMU's sockets live under the hosts' data directories.
		if f.dir, err = os.MkdirTemp("", "abfl-"); err != nil {
			return nil, fmt.Errorf("fleettest: %w", err)
		}
		f.tempDir = true
	}
	// The postgres user and the VMMs' own uids traverse it.
	if err := os.MkdirAll(f.dir, 0o755); err != nil {
		return nil, fmt.Errorf("fleettest: %w", err)
	}
	if err := os.Chmod(f.dir, 0o755); err != nil {
		return nil, fmt.Errorf("fleettest: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, f.Close())
		}
	}()
	f.secretFile = filepath.Join(f.dir, "fleet-secret")
	f.adminKeyFile = filepath.Join(f.dir, "admin-key")
	if err := os.WriteFile(f.secretFile, []byte(randHex(32)+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("fleettest: %w", err)
	}
	if f.net, err = newNetwork(ctx); err != nil {
		return nil, err
	}
	o.Logf("fleettest: bridge %s at %s", f.net.bridge, f.net.cidr())
	f.pg, err = pgserver.Start(ctx, pgserver.Options{Dir: filepath.Join(f.dir, "pg"), Listen: "127.0.0.1," + f.net.gatewayIP(), TrustNet: f.net.cidr()})
	if err != nil {
		return nil, err
	}
	f.record(f.pg.PID())
	o.Logf("fleettest: postgres pid %d at %s", f.pg.PID(), f.DSN())
	if o.SnapshotStore {
		if f.bucket, err = startBucket(f.net.gatewayIP()); err != nil {
			return nil, err
		}
		o.Logf("fleettest: snapshot store at %s", f.StoreURL())
	}
	for i := range o.Hosts {
		if err := f.net.addHost(ctx, i); err != nil {
			return nil, err
		}
		f.netHosts = i + 1
		if err := os.MkdirAll(f.HostDataDir(i), 0o755); err != nil {
			return nil, fmt.Errorf("fleettest: %w", err)
		}
	}
	for i := range o.Hosts {
		if err := f.StartHost(ctx, i); err != nil {
			return nil, err
		}
	}
	for j := range o.Gateways {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		f.gwPorts = append(f.gwPorts, port)
		if err := f.StartGateway(ctx, j); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// DSN is the fleet database's connection string from the root namespace.
func (f *Fleet) DSN() string { return f.pg.DSN("") }

// HostDSN is the database's connection string from the hosts' namespaces.
func (f *Fleet) HostDSN() string {
	return fmt.Sprintf("postgres://postgres@%s:%d/postgres?sslmode=disable", f.net.gatewayIP(), f.pg.Port())
}

// Postgres is the fleet's database server.
func (f *Fleet) Postgres() *pgserver.Server { return f.pg }

// StopPostgres stops the database (a fast shutdown); StartPostgres starts
// it again on the same data and port.
func (f *Fleet) StopPostgres() error { return f.pg.Stop() }

// StartPostgres starts the database again after StopPostgres.
func (f *Fleet) StartPostgres(ctx context.Context) error {
	if err := f.pg.Start(ctx); err != nil {
		return err
	}
	f.record(f.pg.PID())
	return nil
}

// AdminKey is the fleet's admin API key (the gateways' bootstrap key).
func (f *Fleet) AdminKey() string { return f.adminKey }

// HostKey is the API key every hostd accepts directly (--api-key).
func (f *Fleet) HostKey() string { return f.hostKey }

// SecretFile holds the fleet secret the hosts' tokens derive from.
func (f *Fleet) SecretFile() string { return f.secretFile }

// Dir is the directory the fleet writes to.
func (f *Fleet) Dir() string { return f.dir }

// Hosts is how many hosts the fleet has.
func (f *Fleet) Hosts() int { return f.o.Hosts }

// HostName is host i's name in the fleet.
func (f *Fleet) HostName(i int) string { return fmt.Sprintf("host-%d", i) }

// HostAddr is host i's address (in its namespace, on the bridge).
func (f *Fleet) HostAddr(i int) string { return f.net.hostIP(i) }

// HostURL is host i's API.
func (f *Fleet) HostURL(i int) string {
	return "http://" + net.JoinHostPort(f.net.hostIP(i), strconv.Itoa(HostPort))
}

// HostNetns is host i's network namespace (under /run/netns).
func (f *Fleet) HostNetns(i int) string { return f.net.netns(i) }

// HostDataDir is host i's data directory.
func (f *Fleet) HostDataDir(i int) string { return filepath.Join(f.dir, "h"+strconv.Itoa(i)) }

// HostLog is host i's log file.
func (f *Fleet) HostLog(i int) string { return filepath.Join(f.dir, fmt.Sprintf("hostd-%d.log", i)) }

// HostPID is host i's hostd pid (0 when it is not running).
func (f *Fleet) HostPID(i int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.hosts[i]; p != nil && !p.exited() {
		return p.pid()
	}
	return 0
}

// VMMPIDs lists the VMM processes of host i: its hostd's descendants and
// any process naming its data directory (a VMM that outlived its hostd).
func (f *Fleet) VMMPIDs(i int) []int {
	pids := hostProcs(f.HostPID(i), f.HostDataDir(i))
	f.record(pids...)
	return pids
}

// PIDs is every process the kit started or saw: PostgreSQL, hostds,
// gateways and the VMMs VMMPIDs and KillHost found.
func (f *Fleet) PIDs() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.started...)
}

func (f *Fleet) record(pids ...int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started = append(f.started, pids...)
}

// GatewayURL is replica j's API (the URL to give AGENTBOX_URL).
func (f *Fleet) GatewayURL(j int) string {
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(f.gwPorts[j]))
}

// GatewayPID is replica j's pid (0 when it is not running).
func (f *Fleet) GatewayPID(j int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.gateways[j]; p != nil && !p.exited() {
		return p.pid()
	}
	return 0
}

// GatewayLog is replica j's log file.
func (f *Fleet) GatewayLog(j int) string {
	return filepath.Join(f.dir, fmt.Sprintf("gateway-%d.log", j))
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("fleettest: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// waitHTTP polls url until it answers 200, p exits, or ctx ends.
func waitHTTP(ctx context.Context, url string, p *proc, what string) error {
	c := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if resp, err := c.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("fleettest: %s exited: %s", what, p.tail(3000))
		case <-ctx.Done():
			return fmt.Errorf("fleettest: waiting for %s at %s: %w: %s", what, url, ctx.Err(), p.tail(3000))
		case <-tick.C:
		}
	}
}
