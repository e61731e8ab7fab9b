package netns

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Bandwidth limits (R11). Each direction of the tap has its own token bucket
// filter (TBF) at the same rate:
//
//   - host → guest: what the host sends out of the tap. A TBF root qdisc on
//     the tap queues it.
//   - guest → host: what the guest writes arrives as the tap's ingress, where
//     nothing can queue. An ingress qdisc with a match-everything u32 filter
//     redirects it (act_mirred) to an ifb device in the same namespace, whose
//     root TBF queues it; ifb then hands each packet back to the tap's
//     receive path, so nftables still sees it arrive on the tap.
//
// A police action on the ingress would be shorter, but it drops instead of
// queueing and act_police is not built into every kernel (the CI kernel
// lacks it); ifb and mirred are.

// IfbName is the ifb device's name inside each rate-limited namespace.
const IfbName = "abifb0"

// MinRate is the lowest rate SetRate accepts, in bytes per second. Below it
// the TBF's burst, in scheduler ticks, would near the kernel's 32-bit range.
const MinRate = 8 << 10

// minBurst is one full 64 KiB GSO packet: the tap has VNET_HDR, so the
// guest's TCP segments arrive that large, and a TBF drops any packet
// bigger than its burst that it cannot segment.
const minBurst = 64 << 10

// Burst is the TBF bucket size for rate: 100 ms at the rate, and at least
// 64 KiB. The queue behind the bucket (the TBF limit) holds as much again.
func Burst(rate int64) uint32 {
	return uint32(min(max(rate/10, minBurst), 1<<30))
}

// SetRate caps each direction of the named namespace's tap at bps bytes per
// second; 0 removes the caps. It replaces what an earlier call set, so a
// restored or resumed sandbox can simply call it again.
func SetRate(name string, bps int64) error {
	if bps != 0 && bps < MinRate {
		return fmt.Errorf("netns: rate %d is below the minimum of %d", bps, MinRate)
	}
	ns, err := vnetns.GetFromName(name)
	if err != nil {
		return fmt.Errorf("netns: %s: %w", name, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netns: %s: %w", name, err)
	}
	defer h.Close()
	if err := setRate(h, bps); err != nil {
		return fmt.Errorf("netns: rate limit in %s: %w", name, err)
	}
	return nil
}

func setRate(h *netlink.Handle, bps int64) error {
	tap, err := h.LinkByName(TapName)
	if err != nil {
		return fmt.Errorf("tap: %w", err)
	}
	if err := clearRate(h, tap); err != nil {
		return err
	}
	if bps == 0 {
		return nil
	}
	ifb, err := ensureIfb(h)
	if err != nil {
		return err
	}
	if err := h.QdiscReplace(tbf(ifb.Attrs().Index, bps)); err != nil {
		return fmt.Errorf("ifb tbf: %w", err)
	}
	if err := h.QdiscReplace(tbf(tap.Attrs().Index, bps)); err != nil {
		return fmt.Errorf("tap tbf: %w", err)
	}
	ingress := &netlink.Ingress{QdiscAttrs: netlink.QdiscAttrs{
		LinkIndex: tap.Attrs().Index, Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_INGRESS}}
	if err := h.QdiscAdd(ingress); err != nil {
		return fmt.Errorf("tap ingress qdisc: %w", err)
	}
	redirect := &netlink.U32{
		FilterAttrs: netlink.FilterAttrs{LinkIndex: tap.Attrs().Index, Parent: ingress.Handle,
			Priority: 1, Protocol: unix.ETH_P_ALL},
		// One key that matches every packet (mask 0).
		Sel:     &netlink.TcU32Sel{Flags: netlink.TC_U32_TERMINAL, Keys: []netlink.TcU32Key{{}}},
		Actions: []netlink.Action{netlink.NewMirredAction(ifb.Attrs().Index)},
	}
	if err := h.FilterAdd(redirect); err != nil {
		return fmt.Errorf("tap ingress redirect: %w", err)
	}
	return nil
}

// tbf is a root TBF on link: rate bytes per second, a Burst-sized bucket and
// as much again of queue.
func tbf(link int, rate int64) *netlink.Tbf {
	burst := Burst(rate)
	return &netlink.Tbf{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: link, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT},
		Rate:       uint64(rate),
		Buffer:     netlink.Xmittime(uint64(rate), burst),
		Limit:      2 * burst,
	}
}

// clearRate removes the tap's TBF and ingress qdisc (the ingress filter goes
// with it) and the ifb. Absent ones are not an error.
func clearRate(h *netlink.Handle, tap netlink.Link) error {
	qs, err := h.QdiscList(tap)
	if err != nil {
		return fmt.Errorf("list qdiscs: %w", err)
	}
	var errs []error
	for _, q := range qs {
		a := q.Attrs()
		if q.Type() == "ingress" || (q.Type() == "tbf" && a.Parent == netlink.HANDLE_ROOT) {
			if err := h.QdiscDel(q); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("remove %s qdisc: %w", q.Type(), err))
			}
		}
	}
	if ifb, err := h.LinkByName(IfbName); err == nil {
		if err := h.LinkDel(ifb); err != nil {
			errs = append(errs, fmt.Errorf("remove ifb: %w", err))
		}
	}
	return errors.Join(errs...)
}

func ensureIfb(h *netlink.Handle) (netlink.Link, error) {
	if err := h.LinkAdd(&netlink.Ifb{LinkAttrs: netlink.LinkAttrs{Name: IfbName, TxQLen: 1000}}); err != nil {
		return nil, fmt.Errorf("ifb: %w", err)
	}
	ifb, err := h.LinkByName(IfbName)
	if err != nil {
		return nil, fmt.Errorf("ifb: %w", err)
	}
	if err := h.LinkSetUp(ifb); err != nil {
		return nil, fmt.Errorf("ifb up: %w", err)
	}
	return ifb, nil
}

// Rate is what SetRate left on the named namespace's tap: the TBF rates of
// both directions (0 where there is none) and whether the ingress redirect
// to the ifb is in place.
type Rate struct {
	HostToGuest, GuestToHost int64
	Redirect                 bool
}

// GetRate reads the limits back (tests and diagnostics).
func GetRate(name string) (Rate, error) {
	var r Rate
	ns, err := vnetns.GetFromName(name)
	if err != nil {
		return r, fmt.Errorf("netns: %s: %w", name, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return r, fmt.Errorf("netns: %s: %w", name, err)
	}
	defer h.Close()
	tap, err := h.LinkByName(TapName)
	if err != nil {
		return r, fmt.Errorf("netns: tap: %w", err)
	}
	r.HostToGuest, err = tbfRate(h, tap)
	if err != nil {
		return r, err
	}
	ifb, err := h.LinkByName(IfbName)
	if err != nil {
		return r, nil
	}
	if r.GuestToHost, err = tbfRate(h, ifb); err != nil {
		return r, err
	}
	fs, err := h.FilterList(tap, netlink.MakeHandle(0xffff, 0))
	if err != nil && !errors.Is(err, unix.EINVAL) {
		return r, fmt.Errorf("netns: list filters: %w", err)
	}
	for _, f := range fs {
		if u, ok := f.(*netlink.U32); ok && u.RedirIndex == ifb.Attrs().Index {
			r.Redirect = true
		}
	}
	return r, nil
}

func tbfRate(h *netlink.Handle, l netlink.Link) (int64, error) {
	qs, err := h.QdiscList(l)
	if err != nil {
		return 0, fmt.Errorf("netns: list qdiscs: %w", err)
	}
	for _, q := range qs {
		if t, ok := q.(*netlink.Tbf); ok && t.Parent == netlink.HANDLE_ROOT {
			return int64(t.Rate), nil
		}
	}
	return 0, nil
}
