package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/agent/agentclient"
	"github.com/agentbox/agentbox/agent/channel"
	"github.com/agentbox/agentbox/hostd/cgroup"
	"github.com/agentbox/agentbox/snapshot"
	"github.com/agentbox/agentbox/vmm"
)

// runningVM is one VM of a sandbox and its agent connection. A sandbox has a new
// runningVM after each resume; what outlives the VM is in its entry.
type runningVM struct {
	id  string
	dir string
	vm  vmm.VM
	log *slog.Logger
	// op serializes lifecycle operations (snapshot, pause, delete).
	op sync.Mutex
	// overlay is the disk file the VM writes; snapshotID the snapshot whose
	// layer it overlays; disks counts overlays made, for their names.
	overlay    string
	snapshotID string
	disks      int
	// env is the sandbox's env, which every command gets; cwd is the
	// default working directory of commands and user their default user
	// (from a template; "" = root).
	env       map[string]string
	cwd, user string
	gone      chan struct{} // closed when the sandbox is deleted, paused or fails
	// why says why gone was closed (ErrDeleted, ErrPaused or a failure).
	why  error
	once sync.Once

	// meter counts the agent channel's bytes (the entry's).
	meter *meter
	// spawn runs background work that the manager's Close waits for.
	spawn func(func()) bool
	// dialing is held (one slot) by the caller that connects the agent.
	dialing chan struct{}
	mu      sync.Mutex
	agent   *agentclient.Client

	limits Limits
	// background is set on a warm pool's sandbox until it is claimed: its
	// VMM's cgroup has the least CPU weight (cgroup.Limits.Background).
	background bool
	cgroup     *cgroup.Group
	// unhold drops the ledger's hold of cgroup (groups.go).
	unhold func()
	// last is the time of the last API activity (unix ns); execs counts
	// the execs running.
	last  atomic.Int64
	execs atomic.Int32
}

// end closes gone, once, saying why.
func (b *runningVM) end(why error) {
	b.once.Do(func() {
		b.why = why
		close(b.gone)
	})
}

// touch records API activity on b.
func (b *runningVM) touch() { b.last.Store(time.Now().UnixNano()) }

// bind returns a ctx that also ends when the sandbox goes.
func (b *runningVM) bind(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() { // ends with ctx, which every caller cancels
		select {
		case <-b.gone:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// every calls fn each period until b goes (for background work that lives
// as long as the VM: the guest clock, the console cap).
func (b *runningVM) every(period time.Duration, fn func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-b.gone:
			return
		case <-t.C:
			fn()
		}
	}
}

// nextOverlay names the box's next overlay file.
func (b *runningVM) nextOverlay() string {
	p := filepath.Join(b.dir, fmt.Sprintf("disk-%d.qcow2", b.disks))
	b.disks++
	return p
}

// client returns the box's agent client, dialing it if needed. The drivers'
// Dial retries until the guest serves or ctx ends (vmm.VM.Dial).
// Dialing waits on b.dialing, not on b.mu, so that a caller whose ctx ends
// stops waiting for a guest that does not answer.
func (b *runningVM) client(ctx context.Context) (*agentclient.Client, error) {
	return b.clientProbed(ctx, health)
}

// Client is client, for snapshot.Guest.
func (b *runningVM) Client(ctx context.Context) (*agentclient.Client, error) { return b.client(ctx) }

var _ snapshot.Guest = (*runningVM)(nil)

// health is the probe of client: a Health call.
func health(ctx context.Context, c *agentclient.Client) error {
	_, err := c.Health(ctx)
	return err
}

// clientProbed is client with the probe a new connection must pass before
// it is the box's (an existing one is returned as it is).
func (b *runningVM) clientProbed(ctx context.Context, check snapshot.Probe) (*agentclient.Client, error) {
	if c := b.current(); c != nil {
		return c, nil
	}
	select {
	case b.dialing <- struct{}{}:
		defer func() { <-b.dialing }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if c := b.current(); c != nil {
		return c, nil
	}
	conn, err := b.vm.Dial(ctx, channel.AgentPort)
	if err != nil {
		return nil, err
	}
	c := agentclient.New(countingConn{Conn: conn, mt: b.meter}, agentclient.WithFileStreams(b.dialFiles))
	hctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	if err := check(hctx, c); err != nil {
		c.Close()
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.agent = c
	b.spawn(func() {
		_ = c.Wait(context.Background())
		if why := c.Why(); why != nil {
			b.log.Warn("agent connection dropped by hostd", "sandbox_id", b.id, "err", why)
		} else if !c.Closed() {
			b.log.Info("agent connection closed by the guest or its channel", "sandbox_id", b.id)
		}
		b.mu.Lock()
		if b.agent == c {
			b.agent = nil
		}
		b.mu.Unlock()
	})
	return c, nil
}

// dialFiles opens a file stream to b's guest, its bytes counted as the
// agent connection's are.
func (b *runningVM) dialFiles(ctx context.Context) (net.Conn, error) {
	conn, err := b.vm.Dial(ctx, channel.FilesPort)
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: conn, mt: b.meter}, nil
}

// healthTimeout bounds the probe (a Health call) that opens an agent
// connection.
const healthTimeout = 30 * time.Second

// current returns b's open agent client, or nil.
func (b *runningVM) current() *agentclient.Client {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.agent != nil && b.agent.Closed() {
		b.agent = nil // closed after a wedged call; its Wait may never return
	}
	return b.agent
}

// connect dials a booting guest's agent within timeout, in attempts of
// bootAttempt; on failure it stops the VM.
func (b *runningVM) connect(ctx context.Context, timeout time.Duration) error {
	return b.connectTries(ctx, timeout, bootAttempt, health)
}

// bootAttempt bounds one connection to a booting guest: a boot takes 1-3 s
// under TCG, more on a loaded host, and a connection that got no answer by
// then is dropped for a fresh, padded one.
const bootAttempt = 20 * time.Second

// Reconnect is connect for a restored or resumed VM, whose agent answers
// at once: each connection gets connectAttempt, and one that fails or gets
// no answer is dropped for a fresh one (the VMM then resyncs the channel
// afresh: a snapshot may have cut a frame of the parent's session in two,
// and the guest swallowed the first marker in it). With Client, it makes
// a box the snapshot.Guest that snapshot.Wake wakes.
func (b *runningVM) Reconnect(ctx context.Context, timeout time.Duration, check snapshot.Probe) error {
	return b.connectTries(ctx, timeout, connectAttempt, check)
}

// connectAttempt bounds one connection's wait for a restored guest's answer.
const connectAttempt = 5 * time.Second

// connectTries connects b's agent within timeout, in attempts of attempt
// each (0: one attempt), each connection checked by check; on failure it
// stops the VM.
func (b *runningVM) connectTries(ctx context.Context, timeout, attempt time.Duration, check snapshot.Probe) error {
	bctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := b.tryConnect(bctx, attempt, check); err != nil {
		stopErr := b.vm.Stop(context.WithoutCancel(ctx))
		return errors.Join(fmt.Errorf("guest agent did not answer: %w (console: %s)", err, tail(filepath.Join(b.dir, "console.log"))), stopErr)
	}
	return nil
}

// tryConnect connects b's agent until it answers, ctx ends or the VM
// exits, each connection within attempt (0: one connection, as long as
// ctx). A connection that fails or gets no answer is dropped, and the
// next one padded (the VMM resyncs the channel afresh).
func (b *runningVM) tryConnect(ctx context.Context, attempt time.Duration, check snapshot.Probe) error {
	for {
		actx, acancel := ctx, context.CancelFunc(func() {})
		if attempt > 0 {
			actx, acancel = context.WithTimeout(ctx, attempt)
		}
		start := time.Now()
		_, err := b.clientProbed(actx, check)
		acancel()
		if err == nil || attempt == 0 || ctx.Err() != nil || errors.Is(err, vmm.ErrNotRunning) || b.vmGone() {
			return err
		}
		b.log.Info("guest agent did not answer; connecting again", "sandbox_id", b.id, "err", err)
		if time.Since(start) < retryPause {
			select { // an attempt that failed at once is not repeated at once
			case <-ctx.Done():
				return err
			case <-time.After(retryPause):
			}
		}
	}
}

// retryPause is the least time between two connections of tryConnect.
const retryPause = 200 * time.Millisecond

// vmGone reports whether b's VM process has ended.
func (b *runningVM) vmGone() bool {
	select {
	case <-b.vm.Done():
		return true
	default:
		return false
	}
}

// closeAgent closes the agent connection, if any.
func (b *runningVM) closeAgent() {
	b.dialing <- struct{}{} // after a dial under way, as it would set agent
	defer func() { <-b.dialing }()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.agent != nil {
		b.agent.Close()
		b.agent = nil
	}
}

// streamErr explains an error that ended a call on a live sandbox.
func (b *runningVM) streamErr(err error) error {
	if why := b.endErr(err); why != nil {
		return why
	}
	if !errors.Is(err, agentclient.ErrClosed) {
		return err
	}
	// The channel closes a moment before a dying VM's process exits: give
	// the exit that moment, so the call says why.
	select {
	case <-b.gone:
	case <-b.vm.Done():
	case <-time.After(agentLostWait):
		return fmt.Errorf("%w: %w", ErrAgentLost, err)
	}
	return b.endErr(err)
}

// endErr says why b's VM is over, with err; nil while it runs.
func (b *runningVM) endErr(err error) error {
	select {
	case <-b.gone:
		return fmt.Errorf("%w (%v)", b.why, err)
	default:
	}
	select {
	case <-b.vm.Done():
		return fmt.Errorf("%w: vm exited", ErrNotRunning)
	default:
	}
	return nil
}

// agentLostWait is how long streamErr waits for a VM whose agent channel
// closed to exit.
const agentLostWait = 2 * time.Second

// settle folds b's cgroup counters into its meter before the cgroup goes.
func (b *runningVM) settle() {
	if b.cgroup == nil {
		return
	}
	st, err := b.cgroup.Stats()
	if err != nil {
		return
	}
	b.meter.mu.Lock()
	b.meter.cpu += st.CPUSeconds
	b.meter.peak = max(b.meter.peak, st.MemoryPeakBytes)
	b.meter.mu.Unlock()
}

// foreground gives a warm pool's sandbox, being claimed, the default CPU
// weight of the sandboxes in use.
func (b *runningVM) foreground() error {
	if b.background && b.cgroup != nil {
		if err := b.cgroup.SetBackground(false); err != nil {
			return err
		}
	}
	b.background = false
	return nil
}

// removeCgroup deletes b's cgroup once its VMM process has exited.
func (b *runningVM) removeCgroup() {
	if b.cgroup == nil {
		return
	}
	if err := b.cgroup.Delete(); err != nil {
		b.log.Error("remove cgroup", "sandbox_id", b.id, "err", err)
	}
	b.cgroup = nil
	b.release()
}

// release drops the ledger's hold of b's cgroup, if any: the reaper may
// take what is left of it.
func (b *runningVM) release() {
	if b.unhold != nil {
		b.unhold()
		b.unhold = nil
	}
}

// cpu is the CPU time of b's VMM cgroup (0 without one).
func (b *runningVM) cpu() float64 {
	if b.cgroup == nil {
		return 0
	}
	st, err := b.cgroup.Stats()
	if err != nil {
		return 0
	}
	return st.CPUSeconds
}
