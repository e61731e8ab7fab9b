package serve

import (
	"context"
	"io"
	"os"
	"testing"

	"github.com/urfave/cli/v3"

	"github.com/agentbox/agentbox/cmd/agentbox/internal/commands"
	"github.com/agentbox/agentbox/cmd/internal/hostdflags"
)

// TestAPIKey: serve's key is agentbox's global --api-key, before or after
// "serve", or AGENTBOX_API_KEY.
func TestAPIKey(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  string
		want string
	}{
		{"after serve", []string{"agentbox", "serve", "--api-key", "ab_1"}, "", "ab_1"},
		{"before serve", []string{"agentbox", "--api-key", "ab_2", "serve"}, "", "ab_2"},
		{"environment", []string{"agentbox", "serve"}, "ab_3", "ab_3"},
		{"flag over environment", []string{"agentbox", "serve", "--api-key", "ab_4"}, "ab_3", "ab_4"},
		{"none", []string{"agentbox", "serve"}, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("AGENTBOX_API_KEY", tc.env)
			if tc.env == "" {
				os.Unsetenv("AGENTBOX_API_KEY")
			}
			var got string
			serve := Command()
			serve.Action = func(_ context.Context, cmd *cli.Command) error {
				cfg, err := hostdflags.Config(cmd, io.Discard)
				got = cfg.APIKey
				return err
			}
			stdio := commands.IO{Out: io.Discard, Err: io.Discard}
			if code := commands.Run(context.Background(), tc.args, stdio, serve); code != 0 {
				t.Fatalf("exit %d", code)
			}
			if got != tc.want {
				t.Errorf("got key %q, want %q", got, tc.want)
			}
		})
	}
}
