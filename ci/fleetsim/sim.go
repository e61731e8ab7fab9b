package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentbox/agentbox/fleet/placement"
	"github.com/agentbox/agentbox/fleet/store"
)

// Config sizes a simulation.
type Config struct {
	DSN        string
	Hosts      int
	Sandboxes  int
	Placers    int
	K          int
	TTL        time.Duration
	Die        int
	Projects   int
	ForkEvery  int           // every Nth placement of a placer forks one of its earlier sandboxes (0: none)
	CacheFor   time.Duration // how long a placer's copy of the hosts' rows is used before it reads them again
	Seed       uint64
	ProgressFn func(placed int)
}

// Report is what a simulation measured and checked.
type Report struct {
	Hosts, Placed, NoRoom, Forks, ForksOnParent int
	Elapsed                                     time.Duration
	P50, P99, Max                               time.Duration
	Died, Lost, LostExpected, FalseExpiries     int
	MarkedAfter                                 time.Duration
	Checks                                      []Check
}

// Rate is placements per second.
func (r Report) Rate() float64 { return float64(r.Placed) / r.Elapsed.Seconds() }

// Check is one invariant checked by SQL: Got rows broke it.
type Check struct {
	Name string
	Got  int
}

// simHost is one simulated host: its capacity and its heartbeat.
type simHost struct {
	reg  store.Registration
	stop chan struct{}
}

// Run registers the hosts, places the sandboxes, lets Die hosts stop
// heartbeating, runs the leader's expiry until they are marked, and checks
// the records.
func Run(ctx context.Context, c Config) (Report, error) {
	st, err := store.Open(ctx, c.DSN)
	if err != nil {
		return Report{}, err
	}
	defer st.Close()
	rep := Report{Hosts: c.Hosts}
	hosts, err := register(ctx, st, c)
	if err != nil {
		return rep, err
	}
	for i := range c.Projects {
		if _, err := st.CreateProject(ctx, store.Project{Name: fmt.Sprintf("p%02d", i)}); err != nil {
			return rep, err
		}
	}
	hbCtx, stopHB := context.WithCancel(ctx)
	var hbWG sync.WaitGroup
	var hbErrs atomic.Int64
	for _, h := range hosts {
		hbWG.Go(func() { heartbeat(hbCtx, st, h, c.TTL, &hbErrs) })
	}
	defer func() { stopHB(); hbWG.Wait() }()

	owner, err := place(ctx, st, c, &rep)
	if err != nil {
		return rep, err
	}
	if err := kill(ctx, st, c, hosts, owner, &rep); err != nil {
		return rep, err
	}
	if n := hbErrs.Load(); n > 0 {
		return rep, fmt.Errorf("%d heartbeats of live hosts failed", n)
	}
	rep.Checks, err = check(ctx, c.DSN)
	return rep, err
}

// register adds the hosts with varied capacity: memory of 32 to 256 GiB,
// 128 to 320 vCPUs, every fifth capped at 150 sandboxes, half holding one
// of five templates' warm pool.
func register(ctx context.Context, st *store.Store, c Config) ([]*simHost, error) {
	var hosts []*simHost
	for i := range c.Hosts {
		capa := store.Capacity{MemMiB: int64(32+(i%8)*32) * 1024, VCPUs: int64(128 + (i%4)*64), Templates: []string{"base"}}
		if i%5 == 0 {
			capa.MaxSandboxes = 150
		}
		if i%10 < 5 {
			capa.Warm = []string{fmt.Sprintf("t%d", i%10)}
			capa.Templates = append(capa.Templates, capa.Warm...)
		}
		h := &simHost{reg: store.Registration{Name: fmt.Sprintf("sim-%03d", i), Addr: fmt.Sprintf("http://10.88.%d.%d:7070", i/250, i%250+1),
			TokenHash: "sim", TTL: c.TTL, Capacity: capa}, stop: make(chan struct{})}
		if _, _, err := st.Register(ctx, h.reg); err != nil {
			return nil, err
		}
		hosts = append(hosts, h)
	}
	return hosts, nil
}

// heartbeat extends h's lease every third of the TTL until ctx ends or h
// is stopped (it "dies").
func heartbeat(ctx context.Context, st *store.Store, h *simHost, ttl time.Duration, errs *atomic.Int64) {
	epoch, err := st.GetHost(ctx, h.reg.Name)
	if err != nil {
		errs.Add(1)
		return
	}
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.stop:
			return
		case <-t.C:
		}
		if err := st.Heartbeat(ctx, h.reg.Name, epoch.Epoch, ttl, h.reg.Capacity); err != nil && ctx.Err() == nil {
			errs.Add(1)
		}
	}
}

// place runs c.Placers concurrent placers until c.Sandboxes are placed;
// it returns each sandbox's host.
func place(ctx context.Context, st *store.Store, c Config, rep *Report) (map[string]string, error) {
	var next atomic.Int64
	var mu sync.Mutex
	owner := map[string]string{}
	var lat []time.Duration
	errc := make(chan error, c.Placers)
	start := time.Now()
	var wg sync.WaitGroup
	for p := range c.Placers {
		wg.Go(func() {
			pl := &placer{st: st, c: c, r: rand.New(rand.NewPCG(c.Seed, uint64(p))), mine: map[string]string{}}
			for {
				n := int(next.Add(1))
				if n > c.Sandboxes || ctx.Err() != nil {
					break
				}
				d, err := pl.one(ctx, n)
				if err != nil {
					errc <- err
					return
				}
				if c.ProgressFn != nil && n%1000 == 0 {
					c.ProgressFn(n)
				}
				pl.lat = append(pl.lat, d)
			}
			mu.Lock()
			defer mu.Unlock()
			lat = append(lat, pl.lat...)
			for id, h := range pl.mine {
				owner[id] = h
			}
			rep.NoRoom += pl.noRoom
			rep.Forks += pl.forks
			rep.ForksOnParent += pl.forksOnParent
		})
	}
	wg.Wait()
	rep.Elapsed = time.Since(start)
	close(errc)
	if err := <-errc; err != nil {
		return nil, err
	}
	rep.Placed = len(owner)
	slices.Sort(lat)
	if len(lat) > 0 {
		rep.P50, rep.P99, rep.Max = lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
	}
	return owner, nil
}

// placer is one control-plane replica's placing loop: a cached copy of
// the hosts' rows, refreshed every CacheFor and updated from each
// reservation, as the gateway keeps.
type placer struct {
	st            *store.Store
	c             Config
	r             *rand.Rand
	hosts         []store.Host
	readAt        time.Time
	mine          map[string]string // sandbox id -> host
	ids           []string
	lat           []time.Duration
	noRoom        int
	forks         int
	forksOnParent int
}

// one places sandbox n and returns how long it took.
func (pl *placer) one(ctx context.Context, n int) (time.Duration, error) {
	t0 := time.Now()
	if time.Since(pl.readAt) > pl.c.CacheFor {
		hs, err := pl.st.Hosts(ctx)
		if err != nil {
			return 0, err
		}
		pl.hosts, pl.readAt = hs, time.Now()
	}
	need := store.Need{Project: fmt.Sprintf("p%02d", n%max(pl.c.Projects, 1)), Count: 1,
		MemoryMiB: int64(256 << (n % 3)), VCPUs: int64(1 + n%4/3), Template: fmt.Sprintf("t%d", n%10)}
	if pl.c.Projects == 0 {
		need.Project = store.DefaultProject
	}
	var cands []string
	parentHost := ""
	if pl.c.ForkEvery > 0 && n%pl.c.ForkEvery == 0 && len(pl.ids) > 0 {
		need.Parent = pl.ids[pl.r.IntN(len(pl.ids))]
		parentHost = pl.mine[need.Parent]
		cands = placement.ChooseFork(slices.Clone(pl.hosts), need, parentHost, pl.c.K, pl.r, time.Now())
		pl.forks++
	} else {
		cands = placement.Choose(slices.Clone(pl.hosts), need, pl.c.K, pl.r, time.Now())
	}
	res, err := pl.st.Reserve(ctx, need, cands)
	if errors.Is(err, store.ErrNoCapacity) {
		pl.noRoom++
		pl.readAt = time.Time{} // read the rows again next time
		return time.Since(t0), nil
	}
	if err != nil {
		return 0, err
	}
	id := fmt.Sprintf("sb-%06d", n)
	if err := pl.st.Commit(ctx, res.Placeholders[0], id); err != nil {
		return 0, err
	}
	d := time.Since(t0)
	if i := slices.IndexFunc(pl.hosts, func(h store.Host) bool { return h.Name == res.Host.Name }); i >= 0 {
		pl.hosts[i] = res.Host
	}
	if parentHost != "" && res.Host.Name == parentHost {
		pl.forksOnParent++
	}
	pl.mine[id] = res.Host.Name
	pl.ids = append(pl.ids, id)
	return d, nil
}

// kill stops c.Die hosts' heartbeats at once and runs the leader's expiry
// (every TTL/10) until all of them are marked dead, at most 4 TTLs.
func kill(ctx context.Context, st *store.Store, c Config, hosts []*simHost, owner map[string]string, rep *Report) error {
	dying := map[string]bool{}
	for i := 0; i < c.Die && i < len(hosts); i++ {
		h := hosts[i*len(hosts)/c.Die]
		dying[h.reg.Name] = true
	}
	for _, h := range owner {
		if dying[h] {
			rep.LostExpected++
		}
	}
	t0 := time.Now()
	for _, h := range hosts {
		if dying[h.reg.Name] {
			close(h.stop)
		}
	}
	rep.Died = len(dying)
	marked := 0
	deadline := t0.Add(4 * c.TTL)
	tick := time.NewTicker(c.TTL / 10)
	defer tick.Stop()
	for marked < len(dying) {
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s only %d of %d dead hosts were marked", 4*c.TTL, marked, len(dying))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		exp, err := st.ExpireLeases(ctx)
		if err != nil {
			return err
		}
		for _, e := range exp {
			if !dying[e.Host] {
				rep.FalseExpiries++
				continue
			}
			marked++
			rep.Lost += e.Lost
		}
	}
	rep.MarkedAfter = time.Since(t0)
	return nil
}

// checks are the fleet's invariants, each a query counting the rows that
// break it.
var checks = []Check{
	{Name: "sandbox alive on a host that is not live"},
	{Name: "sandbox owned under a stale host epoch"},
	{Name: "placeholder left in placing"},
	{Name: "host given more than it admits"},
	{Name: "host's used counters disagree with its rows"},
	{Name: "lost sandbox without a reason"},
}

var checkSQL = []string{
	`SELECT count(*) FROM sandboxes s JOIN hosts h ON h.name = s.host WHERE s.state <> 'lost' AND h.state <> 'live'`,
	`SELECT count(*) FROM sandboxes s JOIN hosts h ON h.name = s.host WHERE s.state IN ('running', 'paused') AND s.host_epoch <> h.epoch`,
	`SELECT count(*) FROM sandboxes WHERE state = 'placing'`,
	`SELECT count(*) FROM hosts WHERE used_mem_mib > mem_mib OR used_vcpus > vcpus OR (max_sandboxes > 0 AND used_sandboxes > max_sandboxes)`,
	`SELECT count(*) FROM hosts h WHERE used_sandboxes <> (SELECT count(*) FROM sandboxes s WHERE s.host = h.name AND s.state <> 'lost')
		OR used_mem_mib <> (SELECT COALESCE(sum(memory_mib), 0) FROM sandboxes s WHERE s.host = h.name AND s.state <> 'lost')`,
	`SELECT count(*) FROM sandboxes WHERE state = 'lost' AND reason = ''`,
}

// check runs the invariants' queries on their own connection.
func check(ctx context.Context, dsn string) ([]Check, error) {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	out := slices.Clone(checks)
	for i, q := range checkSQL {
		if err := pool.QueryRow(ctx, q).Scan(&out[i].Got); err != nil {
			return nil, fmt.Errorf("check %q: %w", out[i].Name, err)
		}
	}
	return out, nil
}
