package blueprint

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/agentbox/agentbox/client"
)

// RunError is a command of a step that did not exit 0.
type RunError struct {
	// ExitCode is the command's exit code (-1 when killed by a signal).
	ExitCode int
	// Signal names the signal that killed it, if any.
	Signal string
	// Stderr is the tail of its stderr, for the build's own commands
	// (run steps stream theirs).
	Stderr string
}

func (e *RunError) Error() string {
	msg := fmt.Sprintf("exit code %d", e.ExitCode)
	if e.Signal != "" {
		msg = "killed by " + e.Signal
	}
	if e.Stderr != "" {
		msg += ": " + e.Stderr
	}
	return msg
}

// step runs step i (0-based) in sandbox id and updates st.
func (b *builder) step(ctx context.Context, id string, i int, st *state) error {
	s := b.bp.Steps[i]
	var err error
	switch s.Kind() {
	case KindRun:
		err = b.runStep(ctx, id, []string{"sh", "-c", s.Run}, s.RunEnv, *st)
	case KindExec:
		err = b.runStep(ctx, id, s.Exec, s.RunEnv, *st)
	case KindFile:
		err = b.fileStep(ctx, id, s.File)
	case KindCopy:
		err = b.copyStep(ctx, id, s.Copy, b.trees[i])
	case KindEnv:
		err = b.envStep(ctx, id, s.Env)
	case KindWorkdir:
		err = b.workdirStep(ctx, id, s.Workdir)
	}
	if err != nil {
		return err
	}
	st.apply(s)
	return nil
}

// runStep runs argv with the step's env (runEnv, then the steps' env on
// top, as a Dockerfile's ENV overrides its ARG), streaming its output to
// Out and Err.
func (b *builder) runStep(ctx context.Context, id string, argv []string, runEnv map[string]string, st state) error {
	env := maps.Clone(runEnv)
	if env == nil {
		env = maps.Clone(st.env)
	} else {
		maps.Copy(env, st.env)
	}
	req := client.ExecRequest{Cmd: argv, Env: env, Cwd: st.workdir, User: st.user}
	var (
		code int
		sig  string
		last io.Writer // the stream written last, if its output ended mid-line
	)
	write := func(w io.Writer, data []byte) error {
		if len(data) == 0 {
			return nil
		}
		last = nil
		if data[len(data)-1] != '\n' {
			last = w
		}
		_, err := w.Write(data)
		return err
	}
	err := b.c.ExecStream(ctx, id, req, func(ev client.Event) error {
		switch ev.Type {
		case client.ExecEventTypeStdout:
			return write(b.out, ev.Data)
		case client.ExecEventTypeStderr:
			return write(b.errw, ev.Data)
		case client.ExecEventTypeExit:
			code, sig = ev.ExitStatus()
		}
		return nil
	})
	if last != nil {
		fmt.Fprintln(last) // so the next progress line starts a line
	}
	if err != nil {
		return err
	}
	if code != 0 || sig != "" {
		return &RunError{ExitCode: code, Signal: sig}
	}
	return nil
}

// exec runs one of the build's own commands, collected, and fails unless
// it exits 0.
func (b *builder) exec(ctx context.Context, id string, req client.ExecRequest) error {
	// The build's own commands (profile, workdir, chmod) run as root
	// whatever the origin's or a user step's user (copies are root's too).
	req.User = "root"
	res, err := b.c.Exec(ctx, id, req)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 || res.Signal != "" {
		return &RunError{ExitCode: res.ExitCode, Signal: res.Signal, Stderr: tail(res.Stderr, 512)}
	}
	return nil
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

// envStep appends the variables to the guest's profile script, so that
// login shells of the template's sandboxes see them.
func (b *builder) envStep(ctx context.Context, id string, env map[string]string) error {
	var lines strings.Builder
	for _, k := range slices.Sorted(maps.Keys(env)) {
		fmt.Fprintf(&lines, "export %s=%s\n", k, shellQuote(env[k]))
	}
	return b.exec(ctx, id, client.ExecRequest{
		Cmd:   []string{"sh", "-c", `mkdir -p "$(dirname "$1")" && cat >> "$1"`, "sh", ProfileFile},
		Stdin: lines.String(),
	})
}

// fileStep writes f in the guest.
func (b *builder) fileStep(ctx context.Context, id string, f *File) error {
	if err := b.c.Mkdir(ctx, id, path.Dir(f.Path)); err != nil {
		return fmt.Errorf("mkdir %s: %w", path.Dir(f.Path), err)
	}
	if err := b.c.WriteFile(ctx, id, f.Path, 0o644, strings.NewReader(f.Content)); err != nil {
		return fmt.Errorf("write %s: %w", f.Path, err)
	}
	return nil
}

// shellQuote quotes s for sh: 'it'\”s'.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// workdirStep creates dir and records it in the guest's workdir file.
func (b *builder) workdirStep(ctx context.Context, id, dir string) error {
	return b.exec(ctx, id, client.ExecRequest{
		Cmd: []string{"sh", "-c", `mkdir -p "$1" && printf '%s\n' "$1" > "$2"`, "sh", dir, WorkdirFile},
	})
}

// copyStep uploads t to dest: a file to dest (or into it when dest ends in
// "/"), a directory's contents into dest. Files keep their modes;
// directories whose mode is not 0755 are chmodded after the upload.
func (b *builder) copyStep(ctx context.Context, id string, c *Copy, t *tree) error {
	if !t.isDir {
		target := c.Dest
		if strings.HasSuffix(target, "/") {
			target = path.Join(target, path.Base(c.Src))
		}
		if err := b.c.Mkdir(ctx, id, path.Dir(target)); err != nil {
			return fmt.Errorf("mkdir %s: %w", path.Dir(target), err)
		}
		if err := b.upload(ctx, id, t.local(t.entries[0]), target, t.entries[0].mode); err != nil {
			return err
		}
		fmt.Fprintf(b.out, "    copied %s\n", t)
		return nil
	}
	chmod := map[fs.FileMode][]string{}
	for _, e := range t.entries {
		target := path.Join(c.Dest, e.rel)
		if !e.mode.IsDir() {
			if err := b.upload(ctx, id, t.local(e), target, e.mode); err != nil {
				return err
			}
			continue
		}
		if err := b.c.Mkdir(ctx, id, target); err != nil {
			return fmt.Errorf("mkdir %s: %w", target, err)
		}
		if perm := e.mode &^ fs.ModeDir; perm != 0o755 && e.rel != "." {
			chmod[perm] = append(chmod[perm], target)
		}
	}
	for _, perm := range slices.Sorted(maps.Keys(chmod)) {
		cmd := append([]string{"chmod", fmt.Sprintf("%o", unixPerm(perm))}, chmod[perm]...)
		if err := b.exec(ctx, id, client.ExecRequest{Cmd: cmd}); err != nil {
			return fmt.Errorf("chmod directories: %w", err)
		}
	}
	fmt.Fprintf(b.out, "    copied %s\n", t)
	return nil
}

func (b *builder) upload(ctx context.Context, id, local, target string, mode fs.FileMode) error {
	f, err := os.Open(local)
	if err != nil {
		return err
	}
	defer f.Close() // read-only; the HTTP client may have closed it already
	if err := b.c.WriteFile(ctx, id, target, mode, f); err != nil {
		return fmt.Errorf("upload %s to %s: %w", local, target, err)
	}
	return nil
}

// unixPerm returns m's permission bits with setuid, setgid and sticky as
// chmod takes them.
func unixPerm(m fs.FileMode) uint32 {
	n := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		n |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		n |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		n |= 0o1000
	}
	return n
}
