package gateway

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/agentbox/agentbox/fleet/hosttoken"
	"github.com/agentbox/agentbox/fleet/store"
)

func hashToken(t string) string { return hosttoken.Hash(t) }

// choose orders the hosts a placement tries: among placeable hosts with
// room, k random candidates ranked by score (a warm pool or base snapshot
// of the template first, then holding it, then most free memory), the
// rest after them as fallbacks.
func choose(hosts []store.Host, n store.Need, k int, r *rand.Rand, now time.Time) []string {
	count := int64(max(n.Count, 1))
	var fit []store.Host
	for _, h := range hosts {
		if !h.Placeable(now) || h.UsedMemMiB+n.MemoryMiB*count > h.MemMiB || h.UsedVCPUs+n.VCPUs*count > h.VCPUs ||
			(h.MaxSandboxes > 0 && h.UsedSandboxes+int(count) > h.MaxSandboxes) {
			continue
		}
		fit = append(fit, h)
	}
	r.Shuffle(len(fit), func(i, j int) { fit[i], fit[j] = fit[j], fit[i] })
	k = min(max(k, 1), len(fit))
	best := fit[:k]
	slices.SortStableFunc(best, func(a, b store.Host) int { return score(b, n) - score(a, n) })
	out := make([]string, 0, len(fit))
	for _, h := range fit {
		out = append(out, h.Name)
	}
	return out
}

// score ranks a host for n: warm beats holding the template, which beats
// neither; then free memory (MiB).
func score(h store.Host, n store.Need) int {
	s := int(min(h.MemMiB-h.UsedMemMiB, 1<<30))
	switch {
	case slices.Contains(h.Warm, n.Template):
		s += 2 << 31
	case n.Template != "" && slices.Contains(h.Templates, n.Template):
		s += 1 << 31
	}
	return s
}
