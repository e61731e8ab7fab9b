package netns

import (
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// TableName is the nftables table in each sandbox namespace.
const TableName = "agentbox"

// applyRules installs the namespace's only rules:
//
//	prerouting (nat):   from the tap, udp/tcp dport 53 → redirect :53;
//	                    any other tcp → redirect :ProxyPort
//	input (drop):       established/related; lo; from the tap to HostIP on
//	                    ProxyPort or 53; other udp from the tap is rejected
//	                    with port-unreachable (a refused connection)
//	forward (drop):     nothing
//	output (drop):      established/related (replies and their errors); lo
func applyRules(name string) error {
	ns, err := vnetns.GetFromName(name)
	if err != nil {
		return err
	}
	defer ns.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return err
	}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: TableName})
	drop, accept := nftables.ChainPolicyDrop, nftables.ChainPolicyAccept
	pre := c.AddChain(&nftables.Chain{Name: "prerouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &accept})
	in := c.AddChain(&nftables.Chain{Name: "input", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &drop})
	c.AddChain(&nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &drop})
	out := c.AddChain(&nftables.Chain{Name: "output", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter, Policy: &drop})

	rule := func(ch *nftables.Chain, exprs ...[]expr.Any) {
		var all []expr.Any
		for _, e := range exprs {
			all = append(all, e...)
		}
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: all})
	}
	fromTap := iifname(TapName)
	rule(pre, fromTap, l4proto(unix.IPPROTO_UDP), dport(DNSPort), redirect(DNSPort))
	rule(pre, fromTap, l4proto(unix.IPPROTO_TCP), dport(DNSPort), redirect(DNSPort))
	rule(pre, fromTap, l4proto(unix.IPPROTO_TCP), redirect(ProxyPort))

	rule(in, ctEstablished(), verdict(expr.VerdictAccept))
	rule(in, iifname("lo"), verdict(expr.VerdictAccept))
	rule(in, fromTap, daddr4(HostIP.AsSlice()), l4proto(unix.IPPROTO_TCP), dport(ProxyPort), verdict(expr.VerdictAccept))
	rule(in, fromTap, daddr4(HostIP.AsSlice()), l4proto(unix.IPPROTO_TCP), dport(DNSPort), verdict(expr.VerdictAccept))
	rule(in, fromTap, daddr4(HostIP.AsSlice()), l4proto(unix.IPPROTO_UDP), dport(DNSPort), verdict(expr.VerdictAccept))
	rule(in, fromTap, l4proto(unix.IPPROTO_UDP), []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_PORT_UNREACH}})

	rule(out, ctEstablished(), verdict(expr.VerdictAccept))
	rule(out, oifname("lo"), verdict(expr.VerdictAccept))
	if err := c.Flush(); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	return nil
}

func ifnameBytes(n string) []byte {
	b := make([]byte, 16)
	copy(b, n)
	return b
}

func iifname(n string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifnameBytes(n)},
	}
}

func oifname(n string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifnameBytes(n)},
	}
}

func l4proto(p byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}},
	}
}

func dport(p uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(p)},
	}
}

func daddr4(ip []byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ip},
	}
}

func redirect(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.Redir{RegisterProtoMin: 1},
	}
}

func ctEstablished() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED),
			Xor:  binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0, 0, 0, 0}},
	}
}

func verdict(k expr.VerdictKind) []expr.Any {
	return []expr.Any{&expr.Verdict{Kind: k}}
}
