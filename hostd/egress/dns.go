package egress

import (
	"strings"

	"github.com/miekg/dns"
)

// dnsTTL is short, so a policy change is seen quickly by guest caches.
const dnsTTL = 5

// serveDNS answers allowed names with the proxy's own address (every guest
// connection ends at the proxy anyway, which resolves the real upstream on
// the host), and everything else with NXDOMAIN.
func (p *Proxy) serveDNS(b *box, w dns.ResponseWriter, req *dns.Msg) {
	resp := new(dns.Msg)
	resp.SetReply(req)
	resp.RecursionAvailable = true
	pol := b.pol.Load()
	for _, q := range req.Question {
		name := strings.ToLower(strings.TrimSuffix(q.Name, "."))
		rule, ok := pol.domainRule(name)
		if !ok {
			if _, inj := firstInject(pol, name); inj {
				rule, ok = "inject:"+name, true
			}
		}
		ev := Event{SandboxID: b.id, Kind: KindDNS, Host: name, Method: dns.TypeToString[q.Qtype], Allowed: ok, Rule: rule}
		if !ok {
			ev.Rule = "denied: name not in allow_domains"
			resp.Rcode = dns.RcodeNameError
			p.record(ev)
			continue
		}
		p.record(ev)
		if q.Qtype == dns.TypeA && q.Qclass == dns.ClassINET {
			resp.Answer = append(resp.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: dnsTTL},
				A:   p.opts.AnswerAddr,
			})
		}
	}
	_ = w.WriteMsg(resp)
}

// firstInject returns the first injection rule for host.
func firstInject(pol *compiled, host string) (InjectRule, bool) {
	rs := pol.injections(host)
	if len(rs) == 0 {
		return InjectRule{}, false
	}
	return rs[0], true
}
