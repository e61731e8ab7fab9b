package portproxy

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/agentbox/agentbox/hostd/internal/fdbudget"
)

// DefaultMaxConns is Options.MaxConnsPerSandbox's default.
const DefaultMaxConns = 256

// warnEvery spaces the warnings about one sandbox's refused requests.
const warnEvery = time.Minute

// ErrOverCap is the error of a request refused because its sandbox holds
// its cap of concurrent service-URL requests, or the host's descriptor
// budget is spent.
var ErrOverCap = errors.New("portproxy: over capacity")

// limiter counts each sandbox's service-URL requests in flight (a
// WebSocket's for as long as it is open): each holds a port-forward stream.
type limiter struct {
	max    int
	budget *fdbudget.Budget
	log    *slog.Logger

	mu     sync.Mutex
	open   map[string]int       // by sandbox
	warned map[string]time.Time // by sandbox: the last warning
}

func newLimiter(max int, budget *fdbudget.Budget, log *slog.Logger) *limiter {
	if max <= 0 {
		max = DefaultMaxConns
	}
	return &limiter{max: max, budget: budget, log: log, open: map[string]int{}, warned: map[string]time.Time{}}
}

// admit takes a slot for a request to sandbox id and returns its release,
// or an error wrapping ErrOverCap that names the cap.
func (l *limiter) admit(id string) (func(), error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var err error
	switch {
	case l.open[id] >= l.max:
		err = fmt.Errorf("%w: sandbox %s holds its cap of %d concurrent service-URL connections", ErrOverCap, id, l.max)
	case !l.budget.Acquire(1):
		err = fmt.Errorf("%w: the host holds its budget of %d file descriptors", ErrOverCap, l.budget.Max())
	default:
		l.open[id]++
		return sync.OnceFunc(func() { l.release(id) }), nil
	}
	now := time.Now()
	if now.Sub(l.warned[id]) >= warnEvery {
		for k, t := range l.warned {
			if now.Sub(t) >= warnEvery {
				delete(l.warned, k)
			}
		}
		l.warned[id] = now
		l.log.Warn("service url requests refused (said once a minute per sandbox)", "sandbox_id", id, "err", err)
	}
	return nil, err
}

func (l *limiter) release(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[id]--; l.open[id] <= 0 {
		delete(l.open, id)
	}
	l.budget.Release(1)
}
