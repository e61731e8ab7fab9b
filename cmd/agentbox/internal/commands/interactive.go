package commands

import (
	"context"
	"errors"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v3"
	"golang.org/x/term"

	"github.com/agentbox/agentbox/client"
)

// runInteractive starts argv as a background session (on a terminal with
// -t) and drives it: `agentbox exec -it ID bash`.
func runInteractive(ctx context.Context, cmd *cli.Command, c *client.Client, id string, argv []string) error {
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	if len(argv) == 0 {
		return errors.New("give a command to run")
	}
	req := client.ExecRequest{Cmd: argv, Cwd: cmd.String("cwd"), Env: cmd.StringMap("env"), Tty: cmd.Bool("tty"), User: cmd.String("user")}
	if req.Tty {
		req.Rows, req.Cols = termSize(cmd)
	}
	execID, err := c.ExecBackground(ctx, id, req)
	if err != nil {
		return err
	}
	return interact(ctx, cmd, c, id, execID, 0)
}

// termSize is the size of the terminal the CLI writes to (0, 0 if none).
func termSize(cmd *cli.Command) (rows, cols int) {
	for _, s := range []any{stdout(cmd), stdin(cmd)} {
		if f, ok := s.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			if w, h, err := term.GetSize(int(f.Fd())); err == nil {
				return h, w
			}
		}
	}
	return 0, 0
}

// interact connects this terminal to session execID: raw mode with -t,
// stdin forwarded with -i, the window size followed, the terminal restored
// on the way out.
func interact(ctx context.Context, cmd *cli.Command, c *client.Client, id, execID string, offset int64) error {
	p, err := c.PTY(ctx, id, execID, offset)
	if err != nil {
		return err
	}
	defer p.Close()
	in, _ := stdin(cmd).(*os.File)
	if cmd.Bool("tty") && in != nil && term.IsTerminal(int(in.Fd())) {
		old, err := term.MakeRaw(int(in.Fd()))
		if err != nil {
			return err
		}
		defer term.Restore(int(in.Fd()), old)
		stop := followWindow(cmd, p)
		defer stop()
	}
	if cmd.Bool("interactive") && in != nil {
		go func() {
			if _, err := io.Copy(p, in); err == nil {
				_ = p.CloseStdin()
			}
		}()
	}
	if _, err := io.Copy(stdout(cmd), p); err != nil {
		return err
	}
	code, sig, ok := p.Exit()
	if !ok {
		return errors.New("session ended without an exit status")
	}
	return exitStatus(code, sig)
}

// followWindow sends the terminal's size now and on every SIGWINCH.
func followWindow(cmd *cli.Command, p *client.PTY) (stop func()) {
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	done := make(chan struct{})
	go func() {
		for {
			if rows, cols := termSize(cmd); rows > 0 {
				_ = p.Resize(rows, cols)
			}
			select {
			case <-winch:
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(winch)
		close(done)
	}
}
