package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"

	"github.com/agentbox/agentbox/hostd/egress"
	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/vmm"
)

// Network is the sandbox network service (hostd/sandboxnet implements it):
// a namespace, tap and egress proxy per sandbox.
type Network interface {
	// Attach stores id's policy and makes its network; it returns the NIC
	// and the guest cmdline arguments (nil, "" for mode none).
	Attach(ctx context.Context, id string, pol egress.Policy) (*vmm.Net, string, error)
	// Detach removes id's network (idempotent).
	Detach(id string) error
	// SetRate caps each direction of id's tap at bps bytes per second (0:
	// none). Calling it again replaces the caps.
	SetRate(id string, bps int64) error
	// Forget removes id's stored policy.
	Forget(ctx context.Context, id string) error
	// Sweep removes namespaces that belong to no live sandbox.
	Sweep() error
	Policy(ctx context.Context, id string) (egress.Policy, error)
	SetPolicy(ctx context.Context, id string, pol egress.Policy) error
}

// netAttachments is the manager's side of sandbox networking: the policy a
// create resolves to, and each sandbox's attachment (kept in its entry).
type netAttachments struct {
	net Network // nil: this hostd gives sandboxes no NIC
	reg *registry
	log *slog.Logger
}

// netAttachment is what boot gives the VM for its network.
type netAttachment struct {
	attached bool
	net      *vmm.Net
	cmdline  string
}

// resolveNetwork fills in the default policy (a NIC whose only peer is the
// proxy, with nothing allowed) and turns SecretEnv into placeholder tokens
// in the env.
func (n *netAttachments) resolve(opts *CreateOptions) error {
	var pol egress.Policy
	switch {
	case opts.Network != nil:
		pol = *opts.Network
	case n.net != nil:
		pol = egress.Policy{Mode: egress.ModeProxy}
	default:
		pol = egress.Policy{Mode: egress.ModeNone}
	}
	if pol.Mode == "" {
		pol.Mode = egress.ModeProxy
	}
	if pol.Mode == egress.ModeProxy && n.net == nil {
		return fmt.Errorf("%w: this hostd has no sandbox networking (network mode must be none)", ErrInvalid)
	}
	if err := pol.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if pol.Mode == egress.ModeProxy {
		opts.Env = withTrustEnv(opts.Env)
	}
	if len(opts.SecretEnv) > 0 {
		if pol.Mode != egress.ModeProxy {
			return fmt.Errorf("%w: secret_env needs network mode proxy", ErrInvalid)
		}
		env := maps.Clone(opts.Env)
		if env == nil {
			env = map[string]string{}
		}
		pol.Placeholders = map[string]string{}
		for name, secret := range opts.SecretEnv {
			token := placeholder(secret)
			env[name] = token
			pol.Placeholders[token] = secret
		}
		opts.Env = env
	}
	opts.Network = &pol
	return nil
}

// trustEnv points the TLS stacks that ignore the system store (Python's
// requests and pip use certifi, Node its own list) at the system bundle,
// where guestinit installs the egress proxy's CA.
var trustEnv = map[string]string{
	"SSL_CERT_FILE":       "/etc/ssl/certs/ca-certificates.crt",
	"REQUESTS_CA_BUNDLE":  "/etc/ssl/certs/ca-certificates.crt",
	"PIP_CERT":            "/etc/ssl/certs/ca-certificates.crt",
	"NODE_EXTRA_CA_CERTS": "/etc/ssl/certs/ca-certificates.crt",
}

// withTrustEnv adds trustEnv to env, keeping the caller's values.
func withTrustEnv(env map[string]string) map[string]string {
	out := maps.Clone(env)
	if out == nil {
		out = map[string]string{}
	}
	for k, v := range trustEnv {
		if _, set := out[k]; !set {
			out[k] = v
		}
	}
	return out
}

// placeholder is a random token that stands for a secret in the guest.
func placeholder(secret string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "agentbox-placeholder-" + secret + "-" + hex.EncodeToString(b)
}

// attachNetwork makes the sandbox's network before boot.
func (n *netAttachments) attach(ctx context.Context, id string, pol *egress.Policy) error {
	if n.net == nil || pol == nil {
		return nil
	}
	nic, args, err := n.net.Attach(ctx, id, *pol)
	if err != nil {
		return fmt.Errorf("sandbox network: %w", err)
	}
	e := n.reg.get(id)
	e.mu.Lock()
	e.net = netAttachment{attached: true, net: nic, cmdline: args}
	e.mu.Unlock()
	return nil
}

// ensureNetwork re-attaches a paused sandbox's network from its stored
// policy if it is not attached (hostd restarted since the pause).
func (n *netAttachments) ensure(ctx context.Context, id string) error {
	if n.net == nil {
		return nil
	}
	e := n.reg.get(id)
	e.mu.Lock()
	ok := e.net.attached
	e.mu.Unlock()
	if ok {
		return nil
	}
	pol, err := n.net.Policy(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil // made before networking: no NIC
	}
	if err != nil {
		return err
	}
	return n.attach(ctx, id, &pol)
}

// inheritedPolicy is a fork's policy: its parent's, placeholders included
// (the parent's env, which the forks get, holds the tokens).
func (n *netAttachments) inherited(ctx context.Context, parent string) *egress.Policy {
	if n.net == nil {
		return nil
	}
	pol, err := n.net.Policy(ctx, parent)
	if err != nil {
		return nil
	}
	return &pol
}

// defaultPolicy is what a warm pool's sandboxes start with; a claim swaps
// in the caller's (claimPolicy).
func (n *netAttachments) defaults() *egress.Policy {
	if n.net == nil {
		return nil
	}
	return &egress.Policy{Mode: egress.ModeProxy}
}

// claimPolicy gives a claimed warm sandbox the caller's policy. It fails if
// the modes differ (the warm VM's NIC cannot come or go).
func (n *netAttachments) claim(ctx context.Context, id string, pol *egress.Policy) error {
	if n.net == nil || pol == nil {
		return nil
	}
	if pol.Mode == egress.ModeNone {
		return fmt.Errorf("%w: a warm sandbox has a NIC", ErrInvalid)
	}
	p := *pol
	if p.Placeholders == nil {
		p.Placeholders = map[string]string{}
	}
	return n.net.SetPolicy(ctx, id, p)
}

// netOf returns the NIC and the extra cmdline of sandbox id.
func (n *netAttachments) of(id string) (*vmm.Net, string) {
	e := n.reg.get(id)
	e.mu.Lock()
	defer e.mu.Unlock()
	a := e.net
	if a.cmdline != "" {
		return a.net, " " + a.cmdline
	}
	return a.net, ""
}

// limitNetwork caps the NIC of cfg (sandbox id's) at bps, with tc on the tap
// and in cfg.Net for backends with their own limiter. It runs before every
// boot, restore and resume, so a namespace made again (after a hostd
// restart) gets the limit again too.
func (n *netAttachments) limit(cfg *vmm.Config, id string, bps int64) error {
	if cfg.Net == nil || n.net == nil {
		return nil
	}
	nic := *cfg.Net // the entry holds the original
	nic.BpsTotal = bps
	cfg.Net = &nic
	if err := n.net.SetRate(id, bps); err != nil {
		return fmt.Errorf("sandbox network: %w", err)
	}
	return nil
}

// detachNetwork removes the sandbox's network (namespace, tap, proxy).
func (n *netAttachments) detach(id string) {
	if n.net == nil {
		return
	}
	if e := n.reg.find(id); e != nil {
		e.mu.Lock()
		e.net = netAttachment{}
		e.mu.Unlock()
	}
	if err := n.net.Detach(id); err != nil {
		n.log.Error("remove sandbox network", "sandbox_id", id, "err", err)
	}
}

func (n *netAttachments) forget(ctx context.Context, id string) {
	if n.net == nil {
		return
	}
	if err := n.net.Forget(ctx, id); err != nil {
		n.log.Error("forget sandbox network policy", "sandbox_id", id, "err", err)
	}
}

func (n *netAttachments) sweep() error {
	if n.net == nil {
		return nil
	}
	return n.net.Sweep()
}

// NetworkPolicy returns a sandbox's egress policy.
func (m *Manager) NetworkPolicy(ctx context.Context, id string) (egress.Policy, error) {
	if _, err := m.Get(ctx, id); err != nil {
		return egress.Policy{}, err
	}
	if m.nets.net == nil {
		return egress.Policy{Mode: egress.ModeNone}, nil
	}
	p, err := m.nets.net.Policy(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return egress.Policy{Mode: egress.ModeNone}, nil
	}
	return p, err
}

// SetNetworkPolicy changes a running sandbox's egress policy; it applies to
// new connections, requests and DNS queries at once.
func (m *Manager) SetNetworkPolicy(ctx context.Context, id string, pol egress.Policy) (egress.Policy, error) {
	if _, err := m.live(ctx, id); err != nil {
		return egress.Policy{}, err
	}
	if m.nets.net == nil {
		return egress.Policy{}, fmt.Errorf("%w: this hostd has no sandbox networking", ErrInvalid)
	}
	if err := m.nets.net.SetPolicy(ctx, id, pol); err != nil {
		if errors.Is(err, egress.ErrInvalidPolicy) {
			return egress.Policy{}, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		return egress.Policy{}, err
	}
	return m.nets.net.Policy(ctx, id)
}
