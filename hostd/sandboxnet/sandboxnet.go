// Package sandboxnet joins the pieces of a sandbox's network: its namespace
// and tap (hostd/netns), the egress proxy serving the sockets opened in that
// namespace (hostd/egress), the policy and the audit log in the store. The
// sandbox manager sees one narrow interface of it.
package sandboxnet

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"

	"github.com/agentbox/agentbox/hostd/egress"
	"github.com/agentbox/agentbox/hostd/netns"
	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/vmm"
)

// Store is the persistence sandboxnet needs (hostd/store implements it).
type Store interface {
	PutNetworkPolicy(ctx context.Context, id string, policy []byte) error
	GetNetworkPolicy(ctx context.Context, id string) ([]byte, error)
	DeleteNetworkPolicy(ctx context.Context, id string) error
}

var _ Store = (*store.Store)(nil)

// Options configure a Service.
type Options struct {
	// DataDir tells this installation's namespaces from others'.
	DataDir string
	Store   Store
	// Proxy options (the CA, secrets, name map, upstream roots); AnswerAddr
	// and Recorder are filled in here.
	Proxy  egress.Options
	Logger *slog.Logger
	// Unremoved, if set, counts each leftover namespace that Sweep could
	// not remove (hostd/metrics).
	Unremoved func()
}

// Service manages every sandbox's network.
type Service struct {
	inst      netns.Installation
	st        Store
	proxy     *egress.Proxy
	log       *slog.Logger
	unremoved func()

	mu  sync.Mutex
	nss map[string]*netns.Sandbox
	// onEvent receives the proxy's audit events (the flight recorder).
	onEvent func(egress.Event)
}

// OnEvent sets the receiver of the proxy's audit events (the sandbox
// manager records them; it is made after the Service).
func (s *Service) OnEvent(f func(egress.Event)) {
	s.mu.Lock()
	s.onEvent = f
	s.mu.Unlock()
}

// New returns a Service.
func New(opts Options) (*Service, error) {
	if opts.Store == nil || opts.DataDir == "" {
		return nil, errors.New("sandboxnet: Store and DataDir are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Unremoved == nil {
		opts.Unremoved = func() {}
	}
	s := &Service{inst: netns.InstallationOf(opts.DataDir), st: opts.Store, log: opts.Logger, unremoved: opts.Unremoved, nss: map[string]*netns.Sandbox{}}
	po := opts.Proxy
	po.AnswerAddr = netns.HostIP.AsSlice()
	po.Recorder = egress.RecorderFunc(s.record)
	po.Logger = opts.Logger
	p, err := egress.New(po)
	if err != nil {
		return nil, err
	}
	s.proxy = p
	return s, nil
}

// Attach stores sandbox id's policy and, unless its mode is none, makes its
// namespace, tap and proxy listeners. It returns the NIC for the VM and the
// guest kernel arguments that configure it (nil and "" for mode none).
func (s *Service) Attach(ctx context.Context, id string, pol egress.Policy) (*vmm.Net, string, error) {
	if err := pol.Validate(); err != nil {
		return nil, "", err
	}
	if err := s.putPolicy(ctx, id, pol); err != nil {
		return nil, "", err
	}
	if pol.Mode == egress.ModeNone {
		return nil, "", nil
	}
	ns, err := s.inst.Create(id)
	if err != nil {
		return nil, "", err
	}
	ls := egress.Listeners{TCP: ns.Proxy, DNSUDP: ns.DNSUDP, DNSTCP: ns.DNSTCP}
	if err := s.proxy.Attach(id, pol, ls); err != nil {
		return nil, "", errors.Join(err, ns.Close())
	}
	s.mu.Lock()
	s.nss[id] = ns
	s.mu.Unlock()
	s.log.Info("sandbox network attached", "sandbox_id", id, "netns", ns.Name)
	return &vmm.Net{Tap: ns.Tap, MAC: ns.MAC}, s.cmdline(), nil
}

// cmdline is the guest kernel arguments of a sandbox's NIC.
func (s *Service) cmdline() string {
	host := netns.HostIP.String()
	return fmt.Sprintf("agentbox.ip=%s/%d agentbox.gw=%s agentbox.dns=%s agentbox.ca=%s",
		netns.GuestIP, netns.PrefixLen, host, host, base64.RawURLEncoding.EncodeToString(s.proxy.CA().CertDER()))
}

// Reattach serves sandbox id's existing namespace again after a hostd
// restart: the proxy's listeners are opened anew in it, with the stored
// policy (the namespace, its tap and nftables table lived on with the
// VMM). Connections that went through the old listeners are gone. It
// returns the guest kernel arguments Attach gave (nil error and "" for a
// sandbox with no NIC).
func (s *Service) Reattach(ctx context.Context, id string) (string, error) {
	pol, err := s.Policy(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if pol.Mode == egress.ModeNone {
		return "", nil
	}
	ns, err := s.inst.Reopen(id)
	if err != nil {
		return "", err
	}
	ls := egress.Listeners{TCP: ns.Proxy, DNSUDP: ns.DNSUDP, DNSTCP: ns.DNSTCP}
	if err := s.proxy.Attach(id, pol, ls); err != nil {
		return "", errors.Join(err, ns.CloseSockets())
	}
	s.mu.Lock()
	s.nss[id] = ns
	s.mu.Unlock()
	s.log.Info("sandbox network reattached", "sandbox_id", id, "netns", ns.Name)
	return s.cmdline(), nil
}

// Release stops serving sandbox id's namespace (the proxy's listeners
// close) and leaves the namespace, its tap and rules for a later hostd's
// Reattach.
func (s *Service) Release(id string) {
	s.proxy.Detach(id)
	s.mu.Lock()
	ns := s.nss[id]
	delete(s.nss, id)
	s.mu.Unlock()
	if ns != nil {
		_ = ns.CloseSockets()
		if ns.Tap != nil {
			_ = ns.Tap.Close()
		}
	}
}

// Detach stops the proxy for sandbox id and removes its namespace. It is
// idempotent.
func (s *Service) Detach(id string) error {
	s.proxy.Detach(id)
	s.mu.Lock()
	ns := s.nss[id]
	delete(s.nss, id)
	s.mu.Unlock()
	if ns == nil {
		return netns.Remove(s.inst.Name(id))
	}
	return ns.Close()
}

// SetRate caps each direction of sandbox id's tap at bps bytes per second
// (0 removes the caps); see netns.SetRate.
func (s *Service) SetRate(id string, bps int64) error {
	return netns.SetRate(s.inst.Name(id), bps)
}

// Forget removes sandbox id's stored policy (its events stay).
func (s *Service) Forget(ctx context.Context, id string) error {
	return s.st.DeleteNetworkPolicy(ctx, id)
}

// Sweep removes this installation's namespaces that belong to no live
// sandbox (left by a hostd that was killed). One it cannot remove (busy:
// mounted again elsewhere) is logged, counted (Options.Unremoved) and
// left: it names no live sandbox, and a hostd that refused to start for it
// would serve none. Only a failed listing is an error.
func (s *Service) Sweep() error {
	s.mu.Lock()
	live := make(map[string]bool, len(s.nss))
	for id := range s.nss {
		live[id] = true
	}
	s.mu.Unlock()
	removed, failed, err := s.inst.Sweep(func(id string) bool { return live[id] })
	for _, id := range removed {
		s.log.Warn("removed orphaned sandbox network namespace", "sandbox_id", id)
	}
	for id, ferr := range failed {
		s.log.Error("cannot remove orphaned sandbox network namespace; left in place", "sandbox_id", id, "netns", s.inst.Name(id), "err", ferr)
		s.unremoved()
	}
	return err
}

// Policy returns sandbox id's stored policy.
func (s *Service) Policy(ctx context.Context, id string) (egress.Policy, error) {
	b, err := s.st.GetNetworkPolicy(ctx, id)
	if err != nil {
		return egress.Policy{}, err
	}
	var p egress.Policy
	if err := json.Unmarshal(b, &p); err != nil {
		return egress.Policy{}, fmt.Errorf("sandboxnet: policy of %s: %w", id, err)
	}
	return p, nil
}

// SetPolicy stores and applies a new policy for a running sandbox. The mode
// cannot change (a NIC is not added or removed while the VM runs); nil
// Placeholders keep the old ones.
func (s *Service) SetPolicy(ctx context.Context, id string, pol egress.Policy) error {
	old, err := s.Policy(ctx, id)
	if err != nil {
		return err
	}
	if pol.Mode == "" {
		pol.Mode = old.Mode
	}
	if pol.Mode != old.Mode {
		return fmt.Errorf("%w: mode cannot change from %s to %s on a running sandbox", egress.ErrInvalidPolicy, old.Mode, pol.Mode)
	}
	if pol.Placeholders == nil {
		pol.Placeholders = old.Placeholders
	}
	if err := pol.Validate(); err != nil {
		return err
	}
	if pol.Mode == egress.ModeProxy {
		if err := s.proxy.SetPolicy(id, pol); err != nil {
			return err
		}
	}
	s.log.Info("sandbox network policy changed", "sandbox_id", id)
	return s.putPolicy(ctx, id, pol)
}

func (s *Service) putPolicy(ctx context.Context, id string, pol egress.Policy) error {
	b, err := json.Marshal(pol)
	if err != nil {
		return err
	}
	return s.st.PutNetworkPolicy(ctx, id, b)
}

func (s *Service) record(ev egress.Event) {
	s.mu.Lock()
	on := s.onEvent
	s.mu.Unlock()
	if on != nil {
		on(ev)
	}
	s.log.Debug("egress", "sandbox_id", ev.SandboxID, "kind", ev.Kind, "host", net.JoinHostPort(ev.Host, strconv.Itoa(ev.Port)), "allowed", ev.Allowed, "rule", ev.Rule)
}
