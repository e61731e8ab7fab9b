package api

import (
	"time"

	"github.com/agentbox/agentbox/hostd/sandbox"
)

// The longest durations a request may give, in seconds. Each is also its
// field's maximum in openapi.yaml (TestSecondsMatchSpec), so the validator
// refuses more before a handler runs; seconds checks again where the
// handler reads the field. All are far below what time.Duration holds
// (292 years): time.Duration(n) * time.Second wraps above that, and
// exec_timeout_s 18446744074 became 0.48 s.
const (
	// maxLifetimeS bounds a sandbox's timeout_s, at create and extended:
	// 366 days, sandbox.MaxTimeoutS.
	maxLifetimeS = sandbox.MaxTimeoutS
	// maxWaitS bounds exec_timeout_s, idle_timeout_s and an exec's
	// timeout_s: 30 days. An exec that should outlive it is a service,
	// run in the background with no timeout.
	maxWaitS = 30 * 24 * 3600
	// maxShareS bounds a share link's expires_in_s: 30 days.
	maxShareS = int(maxShareTTL / time.Second)
)

// seconds is field's n seconds as a Duration, refused (a 400 naming the
// field) outside 0..maxS. Every request's count of seconds goes through it
// before it becomes a Duration or reaches the manager.
func seconds(field string, n, maxS int) (time.Duration, error) {
	if n < 0 || n > maxS {
		return 0, badRequest(CodeInvalidRequest, "%s must be 0..%d seconds, got %d", field, maxS, n)
	}
	return time.Duration(n) * time.Second, nil
}
