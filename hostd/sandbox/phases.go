package sandbox

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strings"
	"time"
)

// phaseLog logs how long each phase of one create, restore or claim took,
// as debug records with stable keys: msg "create phase", sandbox_id, path
// (boot, restore, claim), phase and took. `make bench` (ci/bench) sums
// them into its breakdown.
type phaseLog struct {
	log  *slog.Logger
	id   string
	path string
	last time.Time
}

// newPhases starts the phase log of path ("boot", "restore", ...) of
// sandbox id.
func newPhases(log *slog.Logger, id, path string) *phaseLog {
	return &phaseLog{log: log, id: id, path: path, last: time.Now()}
}

// done ends the phase called name.
func (p *phaseLog) done(name string) {
	now := time.Now()
	p.log.Debug("create phase", "sandbox_id", p.id, "path", p.path, "phase", name, "took", now.Sub(p.last))
	p.last = now
}

// guest logs the guest's own phases from guestinit's READY line in the
// console log ("AGENTBOX-READY in 812ms kernel=401ms modules=75ms ...").
func (p *phaseLog) guest(consoleLog string) {
	if !p.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	b, err := os.ReadFile(consoleLog)
	if err != nil {
		return
	}
	i := bytes.LastIndex(b, []byte("AGENTBOX-READY in "))
	if i < 0 {
		return
	}
	line, _, _ := strings.Cut(string(b[i:min(len(b), i+512)]), "\n")
	fields := strings.Fields(line)
	if len(fields) < 3 {
		return
	}
	for _, f := range fields[3:] {
		name, v, ok := strings.Cut(f, "=")
		d, err := time.ParseDuration(v)
		if !ok || err != nil {
			continue
		}
		p.log.Debug("create phase", "sandbox_id", p.id, "path", "guest", "phase", name, "took", d)
	}
}
