package api

import "testing"

// A release refuses a sandbox that is not paused and durable (releasing
// it would lose it) and an unknown one.
func TestReleaseRefusesWhatIsNotDurable(t *testing.T) {
	env := newTestEnv(t)
	wantError(t, env.do(t, "POST", "/v1/sandboxes/sb1/release", nil), 409, CodeNotDurable)
	if resp := env.do(t, "POST", "/v1/sandboxes/sb1/pause", nil); resp.StatusCode != 200 {
		t.Fatalf("pause: %s", resp.Status)
	}
	wantError(t, env.do(t, "POST", "/v1/sandboxes/sb1/release", nil), 409, CodeNotDurable)
	wantError(t, env.do(t, "POST", "/v1/sandboxes/nope/release", nil), 404, CodeSandboxNotFound)
	if resp := env.do(t, "GET", "/v1/sandboxes/sb1", nil); resp.StatusCode != 200 {
		t.Errorf("after refused releases: GET %s, want the sandbox still there", resp.Status)
	}
}
