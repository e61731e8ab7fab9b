//go:build race

package sandbox_test

// raceEnabled shrinks the hostile agents' endless streams: under the race
// detector each byte through ttrpc and yamux costs ~20 times as much. The
// full volume, and the check that it is several times hostd's heap budget,
// run without it (make test-vm runs this package's tests too).
const raceEnabled = true
