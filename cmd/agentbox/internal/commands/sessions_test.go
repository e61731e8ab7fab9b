package commands

import (
	"context"
	"strings"
	"testing"
)

func TestSessionCommands(t *testing.T) {
	env := newCLIEnv(t)
	id := env.create(t)
	tests := []struct {
		name      string
		args      []string
		code      int
		stdoutHas string
		stderrHas string
	}{
		{"background prints the exec id", []string{"exec", "--background", id, "sleep", "9"}, 0, "e1\n", ""},
		{"background, short flag", []string{"exec", "-d", id, "sleep", "9"}, 0, "e1\n", ""},
		{"attach reads from the offset", []string{"attach", "--offset", "7", id, "e1"}, 0, "7\n", ""},
		{"attach to an unknown session", []string{"attach", id, "e9"}, 1, "", "sandbox_not_found"},
		{"attach needs two ids", []string{"attach", id}, 1, "", "give a sandbox id and an exec id"},
		{"ps", []string{"ps", id}, 0, "e1", ""},
		{"ps shows the status", []string{"ps", id}, 0, "exited 0", ""},
		{"url without service URLs", []string{"url", id, "8000"}, 1, "", "not_supported"},
		{"url needs a port number", []string{"url", id, "http"}, 1, "", "port"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := env.run(t, context.Background(), "", tc.args...)
			if got.code != tc.code || !strings.Contains(got.stdout, tc.stdoutHas) || !strings.Contains(got.stderr, tc.stderrHas) {
				t.Errorf("got exit %d, stdout %q, stderr %q; want %d, %q, %q", got.code, got.stdout, got.stderr, tc.code, tc.stdoutHas, tc.stderrHas)
			}
		})
	}
}
