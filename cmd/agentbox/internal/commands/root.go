// Package commands holds the agentbox CLI's client commands, one file per
// noun, and the root command that ties them together. Every command talks
// to hostd through the Go client (package client) only.
package commands

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/urfave/cli/v3"
)

// IO is the CLI's standard streams.
type IO struct {
	In       io.Reader
	Out, Err io.Writer
}

// Root returns the agentbox command with the client commands and extra
// (the caller's, e.g. serve) as subcommands.
func Root(stdio IO, extra ...*cli.Command) *cli.Command {
	root := &cli.Command{
		Name:  "agentbox",
		Usage: "sandbox microVMs for AI agents",
		Description: "agentbox serve runs the daemon; the other commands talk to it over its API\n" +
			"(AGENTBOX_URL, default " + defaultURL + "; key from AGENTBOX_API_KEY or the data directory).",
		Flags:  globalFlags(),
		Reader: stdio.In,
		Writer: stdio.Out,
		Commands: append([]*cli.Command{createCommand(), lsCommand(), rmCommand(), execCommand(), runCommand(), cpCommand(),
			snapshotCommand(), forkCommand(), diffCommand(), lineageCommand(), replayCommand(), pauseCommand(), resumeCommand(), templateCommand(),
			networkCommand(), eventsCommand(), watchCommand(), secretCommand(), keyCommand(), projectCommand(), hostCommand(), migrateCommand()}, append(append(sessionCommands(), limitCommands()...), extra...)...),
		// Errors are returned to Run, which owns the exit code.
		ExitErrHandler: func(context.Context, *cli.Command, error) {},
		ErrWriter:      stdio.Err,
		HideVersion:    true,
	}
	root.OnUsageError = usageError
	for _, c := range root.Commands {
		// --env A=1,2 sets A to "1,2"; values are not split at commas.
		c.DisableSliceFlagSeparator = true
		c.OnUsageError = usageError
	}
	return root
}

// Run runs the CLI with args (os.Args) and returns the process's exit code:
// the remote command's for exec and run, 1 for other errors, 130 when
// interrupted.
func Run(ctx context.Context, args []string, stdio IO, extra ...*cli.Command) int {
	err := Root(stdio, extra...).Run(ctx, args)
	var (
		exit  *ExitError
		usage *UsageError
	)
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.Code
	case errors.As(err, &usage):
		fmt.Fprintf(stdio.Err, "agentbox: %v (see --help)\n", usage.Err)
		return 2
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		fmt.Fprintln(stdio.Err, "agentbox: interrupted")
		return 130
	}
	fmt.Fprintf(stdio.Err, "agentbox: %v\n", err)
	return 1
}

// ExitError ends the CLI with Code and no message (the remote command has
// already spoken).
type ExitError struct {
	Code int
}

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// UsageError is a command line the CLI could not parse; it exits 2.
type UsageError struct {
	Err error
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// usageError replaces urfave/cli's help dump with a one-line error.
func usageError(_ context.Context, _ *cli.Command, err error, _ bool) error {
	return &UsageError{Err: err}
}

// stdout and stderr are the CLI's streams, as set on the root command.
func stdout(cmd *cli.Command) io.Writer { return cmd.Root().Writer }
func stderr(cmd *cli.Command) io.Writer { return cmd.Root().ErrWriter }
func stdin(cmd *cli.Command) io.Reader  { return cmd.Root().Reader }
