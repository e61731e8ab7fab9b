package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Where a VMM's proportional set size goes, by kind of mapping.
const (
	pssTCG    = "TCG translation cache"          // QEMU's code buffer: anonymous and executable
	pssOwn    = "guest memory, pages of its own" // copied-on-write or private to this VM
	pssShared = "guest memory, its share of the snapshot's pages"
	pssQEMU   = "QEMU itself (heap, stacks, libraries, device buffers)"
	pssTotal  = "total"
	// privateSuffix marks a kind's private pages (Private_Clean and
	// Private_Dirty) in pssOf's map, for the kinds outside guest memory:
	// what one more process adds when its libraries are mapped already.
	privateSuffix = ", private pages"
)

// pssKinds are the kinds of pssOf, in the order the bench prints them.
var pssKinds = []string{pssTCG, pssOwn, pssShared, pssQEMU}

// pss is the proportional set size of pid in bytes.
func pss(pid int) (int64, error) {
	by, err := pssOf(pid)
	return by[pssTotal], err
}

// pssOf splits the proportional set size of VMM pid (bytes) by kind of
// mapping, from /proc/pid/smaps: the guest's RAM is the mapping of a
// snapshot's memory file or of an agentbox memfd.
func pssOf(pid int) (map[string]int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	by := map[string]int64{}
	var guest, tcg bool
	var mapPss int64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if !strings.HasSuffix(fields[0], ":") { // a mapping's header line
			name := ""
			if len(fields) > 5 {
				name = fields[5]
			}
			guest = strings.HasSuffix(name, "/memory") || strings.HasPrefix(name, "/memfd:agentbox-")
			tcg = name == "" && len(fields) > 1 && strings.Contains(fields[1], "x")
			continue
		}
		if len(fields) < 2 {
			continue
		}
		kb, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			continue
		}
		switch b := kb << 10; {
		case fields[0] == "Pss:":
			mapPss = b
			by[pssTotal] += b
			switch {
			case tcg:
				by[pssTCG] += b
			case guest:
				by[pssShared] += b // less its private pages, below
			default:
				by[pssQEMU] += b
			}
		case guest && (fields[0] == "Private_Clean:" || fields[0] == "Private_Dirty:"):
			b = min(b, mapPss)
			by[pssOwn] += b
			by[pssShared] -= b
			mapPss -= b
		case fields[0] == "Private_Clean:" || fields[0] == "Private_Dirty:":
			if tcg {
				by[pssTCG+privateSuffix] += b
			} else {
				by[pssQEMU+privateSuffix] += b
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if by[pssTotal] == 0 {
		return nil, fmt.Errorf("no Pss in smaps of %d", pid)
	}
	return by, nil
}

// marginalPSS is what each VM of pids adds to the host's memory beyond the
// first, in bytes, by kind: (sum of all − the first) / (n − 1). Pages the
// VMs share count once in the sum, as PSS splits them among their mappers.
func marginalPSS(pids []int) (map[string]float64, error) {
	if len(pids) < 2 {
		return nil, fmt.Errorf("marginal PSS needs 2 VMs or more, got %d", len(pids))
	}
	sum, first := map[string]int64{}, map[string]int64{}
	for i, pid := range pids {
		by, err := pssOf(pid)
		if err != nil {
			return nil, err
		}
		for k, v := range by {
			sum[k] += v
			if i == 0 {
				first[k] = v
			}
		}
	}
	out := map[string]float64{}
	for k, v := range sum {
		out[k] = float64(v-first[k]) / float64(len(pids)-1)
	}
	return out, nil
}
