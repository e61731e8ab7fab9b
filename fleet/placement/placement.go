// Package placement is the fleet's placement rule (DESIGN R17), a pure
// function over the hosts' rows: the control plane reads the hosts, asks
// Choose for candidates in order and hands them to store.Reserve, which
// takes the room on the first that still has it in one transaction.
//
// The rule: among the hosts that may take work (live, active, lease not
// lapsed) and have room for the whole request, prefer
//
//  1. a host holding a warm pool (or base snapshot) of the template,
//  2. then a host holding the template,
//  3. then any other;
//
// and within each tier, the best of K random candidates by most free
// memory (power of K choices: close to "most free" fleet-wide, without
// every placer piling onto the same host). The tier's other hosts follow,
// by free memory, so a Reserve that loses a race still finds room. A fork
// (ChooseFork) goes to its parent's host first while it fits there.
//
// The knob is K (DefaultK): 1 is random placement, len(hosts) is strict
// "most free memory".
package placement

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/agentbox/agentbox/fleet/store"
)

// DefaultK is the number of random candidates per tier a placement
// compares.
const DefaultK = 3

// Free is what host h has left: memory (MiB), vCPUs and sandboxes (-1: no
// cap on sandboxes).
func Free(h store.Host) (memMiB, vcpus int64, sandboxes int) {
	sandboxes = -1
	if h.MaxSandboxes > 0 {
		sandboxes = h.MaxSandboxes - h.UsedSandboxes
	}
	return h.MemMiB - h.UsedMemMiB, h.VCPUs - h.UsedVCPUs, sandboxes
}

// Fits reports whether the whole of need fits on h by its row.
func Fits(h store.Host, need store.Need) bool {
	n := int64(max(need.Count, 1))
	mem, cpu, sb := Free(h)
	return mem >= n*need.MemoryMiB && cpu >= n*need.VCPUs && (sb < 0 || sb >= int(n))
}

// Choose returns the names of the hosts that may take need at now, in the
// order to try them (see the package doc); none when nothing fits. k < 1
// is DefaultK. r is the random source (a placer's own; not safe for
// concurrent use).
func Choose(hosts []store.Host, need store.Need, k int, r *rand.Rand, now time.Time) []string {
	if k < 1 {
		k = DefaultK
	}
	var tiers [3][]store.Host
	for _, h := range hosts {
		if !h.Placeable(now) || !Fits(h, need) {
			continue
		}
		tiers[tier(h, need.Template)] = append(tiers[tier(h, need.Template)], h)
	}
	var out []string
	for _, t := range tiers {
		out = append(out, bestOfK(t, k, r)...)
	}
	return out
}

// ChooseFork is Choose for a fork of a sandbox on parentHost: that host
// comes first while the fork fits there (the fork shares its parent's
// memory), the rest after it.
func ChooseFork(hosts []store.Host, need store.Need, parentHost string, k int, r *rand.Rand, now time.Time) []string {
	out := Choose(hosts, need, k, r, now)
	if i := slices.Index(out, parentHost); i > 0 {
		out = slices.Insert(slices.Delete(out, i, i+1), 0, parentHost)
	}
	return out
}

// tier ranks h for template: 0 holds a warm pool of it, 1 holds it, 2
// neither.
func tier(h store.Host, template string) int {
	switch {
	case slices.Contains(h.Warm, template):
		return 0
	case slices.Contains(h.Templates, template):
		return 1
	}
	return 2
}

// bestOfK orders hs: k of them drawn at random, by most free memory, then
// the others by most free memory. hs is reordered in place.
func bestOfK(hs []store.Host, k int, r *rand.Rand) []string {
	if len(hs) == 0 {
		return nil
	}
	k = min(k, len(hs))
	for i := range k { // a partial Fisher-Yates shuffle draws the k
		j := i + r.IntN(len(hs)-i)
		hs[i], hs[j] = hs[j], hs[i]
	}
	byFree := func(a, b store.Host) int {
		fa, _, _ := Free(a)
		fb, _, _ := Free(b)
		return cmp.Or(cmp.Compare(fb, fa), cmp.Compare(a.Name, b.Name))
	}
	slices.SortFunc(hs[:k], byFree)
	slices.SortFunc(hs[k:], byFree)
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.Name
	}
	return out
}
