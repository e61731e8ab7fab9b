// Command hostd runs the agentbox daemon: the same as `agentbox serve`, with
// the same flags (cmd/internal/hostdflags) and --api-key.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v3"

	"github.com/agentbox/agentbox/cmd/internal/hostdflags"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "hostd:", err)
		os.Exit(1)
	}
}

// run runs hostd with the command line args (args[0] is its name) until
// ctx ends; --help prints the flags to stdout, hostd logs to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := &cli.Command{
		Name:   "hostd",
		Usage:  "the agentbox daemon (what `agentbox serve` runs)",
		Flags:  append(hostdflags.Flags(), hostdflags.APIKeyFlag()),
		Action: hostdflags.Action,
		Writer: stdout, ErrWriter: stderr,
		// --mount-root /a,b is the one directory "/a,b", as in agentbox.
		DisableSliceFlagSeparator: true,
		HideVersion:               true,
		// Errors, a bad command line's too, are returned to main, which
		// prints them on one line and owns the exit code.
		OnUsageError:   func(_ context.Context, _ *cli.Command, err error, _ bool) error { return err },
		ExitErrHandler: func(context.Context, *cli.Command, error) {},
	}
	return cmd.Run(ctx, args)
}
