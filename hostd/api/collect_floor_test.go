package api

import "testing"

// With the shared budget spent (one sandbox's guest flooding its output,
// say), another exec's small output still comes back whole.
func TestCollectFloorOutsideBudget(t *testing.T) {
	b := newOutputBudget(1 << 20)
	flood := &collected{max: maxCollected, budget: b}
	flood.add(make([]byte, 4<<20))
	if !flood.truncated || flood.n != collectFloor+1<<20 {
		t.Fatalf("the flood kept %d bytes (truncated %v)", flood.n, flood.truncated)
	}
	small := &collected{max: maxCollected, budget: b}
	small.add([]byte("ok\n"))
	if small.truncated || small.n != 3 {
		t.Fatalf("the small exec kept %d bytes (truncated %v)", small.n, small.truncated)
	}
	small.release()
	flood.release()
	if b.left != 1<<20 {
		t.Fatalf("budget %d after release, want %d", b.left, 1<<20)
	}
}
