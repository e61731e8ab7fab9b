// Package egress is hostd's egress proxy: the only thing a sandbox's guest
// can talk to. It answers the guest's DNS for allowed names only, proxies
// HTTP by its Host header, routes TLS by its SNI (spliced, never decrypted)
// and, for hosts with a credential rule, terminates the guest's TLS with the
// installation's CA, injects the header on the host side and re-originates
// verified TLS to the upstream. Every connection, request and DNS query is an
// audit event.
package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
)

// ErrInvalidPolicy wraps every Policy.Validate failure.
var ErrInvalidPolicy = errors.New("egress: invalid policy")

// Mode says whether a sandbox has a network at all.
type Mode string

// Modes. ModeProxy is the default: a NIC whose only peer is the proxy, with
// an allowlist (empty: every destination is denied).
const (
	ModeProxy Mode = "proxy"
	ModeNone  Mode = "none"
)

// DefaultPorts are the ports allowed when a policy lists none.
var DefaultPorts = []int{80, 443}

// Policy is one sandbox's egress policy.
type Policy struct {
	Mode Mode `json:"mode"`
	// AllowDomains are exact names ("api.github.com"), wildcards
	// ("*.github.com": any name below it, not the name itself), or "*".
	AllowDomains []string `json:"allow_domains,omitempty"`
	// AllowCIDRs are destination ranges the guest may connect to directly by
	// address (any TCP protocol, spliced).
	AllowCIDRs []string `json:"allow_cidrs,omitempty"`
	// AllowPorts are the destination TCP ports allowed (DefaultPorts if empty).
	AllowPorts []int `json:"allow_ports,omitempty"`
	// Inject are the credential rules.
	Inject []InjectRule `json:"inject,omitempty"`
	// Placeholders maps a placeholder token (given to the guest in an env
	// var) to the secret it stands for. hostd fills it in at create.
	Placeholders map[string]string `json:"placeholders,omitempty"`
}

// InjectRule sets Header to Value on every request to Host (exact or
// wildcard). Value may reference secrets as {{secret:NAME}}.
//
// Kind KindAWS re-signs AWS SigV4 requests instead (sigv4.go).
type InjectRule struct {
	Host   string `json:"host"`
	Header string `json:"header"`
	Value  string `json:"value"`
	Kind   string `json:"kind,omitempty"`
}

var secretRef = regexp.MustCompile(`\{\{secret:([A-Za-z0-9_.-]+)\}\}`)

// Secrets returns the names of the secrets that r's value references.
func (r InjectRule) Secrets() []string {
	var out []string
	for _, m := range secretRef.FindAllStringSubmatch(r.Value, -1) {
		out = append(out, m[1])
	}
	return out
}

// Validate reports the first problem with p.
func (p Policy) Validate() error {
	switch p.Mode {
	case ModeProxy, ModeNone:
	default:
		return fmt.Errorf("%w: mode %q (want proxy or none)", ErrInvalidPolicy, p.Mode)
	}
	for _, d := range p.AllowDomains {
		if err := validDomainPattern(d); err != nil {
			return err
		}
	}
	for _, c := range p.AllowCIDRs {
		if _, err := netip.ParsePrefix(c); err != nil {
			return fmt.Errorf("%w: cidr %q: %v", ErrInvalidPolicy, c, err)
		}
	}
	for _, port := range p.AllowPorts {
		if port < 1 || port > 65535 {
			return fmt.Errorf("%w: port %d", ErrInvalidPolicy, port)
		}
	}
	for _, r := range p.Inject {
		if err := validDomainPattern(r.Host); err != nil {
			return err
		}
		if r.Kind == KindAWS {
			if len(r.Secrets()) != 1 {
				return fmt.Errorf("%w: aws rule for %q: value must name one secret as {{secret:NAME}}", ErrInvalidPolicy, r.Host)
			}
			continue
		}
		if r.Kind != "" {
			return fmt.Errorf("%w: inject rule for %q: unknown kind %q", ErrInvalidPolicy, r.Host, r.Kind)
		}
		if r.Header == "" || strings.ContainsAny(r.Header, " :\r\n") || strings.ContainsAny(r.Value, "\r\n") {
			return fmt.Errorf("%w: inject rule for %q: bad header", ErrInvalidPolicy, r.Host)
		}
	}
	return nil
}

func validDomainPattern(d string) error {
	if d == "*" {
		return nil
	}
	name := strings.TrimPrefix(d, "*.")
	if name == "" || strings.ContainsAny(name, "*/: ") || strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") {
		return fmt.Errorf("%w: domain %q", ErrInvalidPolicy, d)
	}
	return nil
}

// matchDomain reports whether host matches pattern.
func matchDomain(pattern, host string) bool {
	pattern, host = strings.ToLower(pattern), strings.ToLower(strings.TrimSuffix(host, "."))
	if pattern == "*" {
		return host != ""
	}
	if suffix, ok := strings.CutPrefix(pattern, "*."); ok {
		return strings.HasSuffix(host, "."+suffix)
	}
	return host == pattern
}

// compiled is a validated policy in the form the proxy checks.
type compiled struct {
	Policy
	cidrs []netip.Prefix
	ports []int
}

func compile(p Policy) (*compiled, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	c := &compiled{Policy: p, ports: p.AllowPorts}
	if len(c.ports) == 0 {
		c.ports = DefaultPorts
	}
	for _, s := range p.AllowCIDRs {
		c.cidrs = append(c.cidrs, netip.MustParsePrefix(s).Masked())
	}
	return c, nil
}

// domainRule returns the allow_domains pattern that host matches.
func (c *compiled) domainRule(host string) (string, bool) {
	for _, d := range c.AllowDomains {
		if matchDomain(d, host) {
			return d, true
		}
	}
	return "", false
}

// cidrRule returns the allow_cidrs prefix that addr is in.
func (c *compiled) cidrRule(addr netip.Addr) (string, bool) {
	for _, p := range c.cidrs {
		if p.Contains(addr.Unmap()) {
			return p.String(), true
		}
	}
	return "", false
}

func (c *compiled) portAllowed(port int) bool { return slices.Contains(c.ports, port) }

// injections returns the rules that apply to host.
func (c *compiled) injections(host string) []InjectRule {
	var out []InjectRule
	for _, r := range c.Inject {
		if matchDomain(r.Host, host) {
			out = append(out, r)
		}
	}
	return out
}
