package commands

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/agentbox/agentbox/client"
)

// maxStdin is the API's limit on ExecRequest.stdin.
const maxStdin = 16 << 20

// execFlags are exec's flags, shared with run.
func execFlags(withEnv bool) []cli.Flag {
	flags := []cli.Flag{
		&cli.StringFlag{Name: "cwd", Usage: "working directory in the sandbox (default /root, or the user's home)"},
		&cli.StringFlag{Name: "user", Aliases: []string{"u"}, Usage: "run as `USER` (root, a name or uid, optionally :group; default: the template's image USER, else root)"},
		&cli.BoolFlag{Name: "no-stdin", Aliases: []string{"n"}, Usage: "do not send stdin, even when it is not a terminal"},
	}
	if withEnv {
		flags = append(flags, &cli.StringMapFlag{Name: "env", Usage: "environment of the command, `KEY=VALUE` (repeatable)"})
	}
	return flags
}

// one stops flag parsing after the first argument: `exec ID ls -la`.
var one = 1

func execCommand() *cli.Command {
	return &cli.Command{
		Name:         "exec",
		Usage:        "run a command in a sandbox, streaming its output; exits with its exit code",
		UsageText:    "agentbox exec [-i] [-t] [--background] [--env K=V]... [--cwd DIR] ID [--] CMD [ARG...]",
		Flags:        append(execFlags(true), sessionFlags()...),
		StopOnNthArg: &one,
		// -it is -i -t.
		UseShortOptionHandling: true,
		Action: func(ctx context.Context, cmd *cli.Command) error {
			args := cmd.Args().Slice()
			if len(args) < 2 {
				return errors.New("exec: give a sandbox id and a command")
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			if cmd.Bool("interactive") || cmd.Bool("tty") {
				return runInteractive(ctx, cmd, c, args[0], args[1:])
			}
			req, err := execRequest(cmd, args[1:])
			if err != nil {
				return err
			}
			if cmd.Bool("background") {
				return runBackground(ctx, cmd, c, args[0], req)
			}
			return runExec(ctx, cmd, c, args[0], req)
		},
	}
}

func runCommand() *cli.Command {
	return &cli.Command{
		Name:         "run",
		Usage:        "create a sandbox, run one command in it, delete it; exits with the command's exit code",
		UsageText:    "agentbox run [create flags] [--cwd DIR] [--] CMD [ARG...]",
		Flags:        append(sandboxFlags(), execFlags(false)...),
		StopOnNthArg: &one,
		Action: func(ctx context.Context, cmd *cli.Command) error {
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			creq, err := createRequest(cmd)
			if err != nil {
				return err
			}
			req, err := execRequest(cmd, cmd.Args().Slice())
			if err != nil {
				return err
			}
			sb, err := c.CreateSandbox(ctx, creq)
			if err != nil {
				return err
			}
			defer deleteSandbox(ctx, cmd, c, sb.ID)
			return runExec(ctx, cmd, c, sb.ID, req)
		},
	}
}

// deleteSandbox deletes id even when ctx was cancelled (Ctrl-C).
func deleteSandbox(ctx context.Context, cmd *cli.Command, c *client.Client, id string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := c.DeleteSandbox(dctx, id); err != nil {
		fmt.Fprintf(stderr(cmd), "agentbox: delete sandbox %s: %v\n", id, err)
	}
}

func execRequest(cmd *cli.Command, argv []string) (client.ExecRequest, error) {
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	if len(argv) == 0 {
		return client.ExecRequest{}, errors.New("give a command to run")
	}
	req := client.ExecRequest{Cmd: argv, Cwd: cmd.String("cwd"), User: cmd.String("user")}
	if cmd.Name == "exec" {
		req.Env = cmd.StringMap("env")
	}
	if in := stdin(cmd); in != nil && !cmd.Bool("no-stdin") && !isTerminal(in) {
		b, err := io.ReadAll(io.LimitReader(in, maxStdin+1))
		if err != nil {
			return req, fmt.Errorf("read stdin: %w", err)
		}
		if len(b) > maxStdin {
			return req, fmt.Errorf("stdin is larger than %d MiB; copy it in with `agentbox cp` instead", maxStdin>>20)
		}
		req.Stdin = string(b)
	}
	return req, nil
}

// isTerminal reports whether r is a terminal (or another character device,
// such as /dev/null, that is no use to send).
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// runExec runs req in sandbox id: streamed to the terminal, or collected
// and printed as JSON with --json. A non-zero exit becomes an *ExitError.
func runExec(ctx context.Context, cmd *cli.Command, c *client.Client, id string, req client.ExecRequest) error {
	if cmd.Bool("json") {
		res, err := c.Exec(ctx, id, req)
		if err != nil {
			return err
		}
		if err := printJSON(stdout(cmd), res); err != nil {
			return err
		}
		return exitStatus(res.ExitCode, res.Signal)
	}
	return printOutput(cmd, func(emit func(client.Event) error) error { return c.ExecStream(ctx, id, req, emit) })
}

// printOutput writes the output events that stream emits to the CLI's
// stdout and stderr and returns the command's exit as exitStatus does.
func printOutput(cmd *cli.Command, stream func(emit func(client.Event) error) error) error {
	out, errw := stdout(cmd), stderr(cmd)
	var code int
	var sig string
	err := stream(func(ev client.Event) error {
		var err error
		switch ev.Type {
		case client.ExecEventTypeStdout:
			_, err = out.Write(ev.Data)
		case client.ExecEventTypeStderr:
			_, err = errw.Write(ev.Data)
		case client.ExecEventTypeExit:
			code, sig = ev.ExitStatus()
		}
		return err
	})
	if err != nil {
		return err
	}
	return exitStatus(code, sig)
}

// exitStatus turns a remote exit into the CLI's: the code itself, or
// 128+N for a command killed by signal N, as shells do.
func exitStatus(code int, signal string) error {
	if signal != "" {
		if n, ok := linuxSignals[strings.TrimPrefix(strings.ToUpper(signal), "SIG")]; ok {
			return &ExitError{Code: 128 + n}
		}
		return &ExitError{Code: 128 + 9}
	}
	switch {
	case code == 0:
		return nil
	case code < 0 || code > 255:
		return &ExitError{Code: 255}
	}
	return &ExitError{Code: code}
}

// linuxSignals are the guest's signal numbers (the host's may differ).
var linuxSignals = map[string]int{
	"HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "TRAP": 5, "ABRT": 6, "BUS": 7, "FPE": 8,
	"KILL": 9, "USR1": 10, "SEGV": 11, "USR2": 12, "PIPE": 13, "ALRM": 14, "TERM": 15,
	"XCPU": 24, "XFSZ": 25,
}
