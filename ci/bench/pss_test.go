package main

import (
	"os"
	"testing"
)

// The kinds of pssOf add up to its total, and the total is the process's.
func TestPSSKindsAddUp(t *testing.T) {
	by, err := pssOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, k := range pssKinds {
		if by[k] < 0 {
			t.Errorf("%s: %d bytes", k, by[k])
		}
		sum += by[k]
	}
	if sum != by[pssTotal] || sum == 0 {
		t.Fatalf("kinds sum to %d, total %d", sum, by[pssTotal])
	}
}

// marginalPSS refuses what has no margin.
func TestMarginalPSSNeedsTwo(t *testing.T) {
	if _, err := marginalPSS([]int{os.Getpid()}); err == nil {
		t.Fatal("one VM: no error")
	}
}

// A kind's private pages are some of its PSS: a page of one process counts
// whole in its PSS.
func TestPSSPrivatePagesWithinPSS(t *testing.T) {
	by, err := pssOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{pssTCG, pssQEMU} {
		if p := by[k+privateSuffix]; p < 0 || p > by[k] {
			t.Errorf("%s: private %d bytes, PSS %d", k, p, by[k])
		}
	}
	if by[pssQEMU+privateSuffix] == 0 {
		t.Error("no private pages outside guest memory in this process")
	}
}
