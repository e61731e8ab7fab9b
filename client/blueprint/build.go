package blueprint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"time"

	"github.com/agentbox/agentbox/client"
)

// BuildOptions configure Build.
type BuildOptions struct {
	// Out receives progress lines and the run steps' stdout; Err their
	// stderr. nil discards.
	Out, Err io.Writer
	// Pool is the template's warm pool size.
	Pool int
	// NoCache runs every step, ignoring cached step snapshots (the new
	// snapshots are still recorded for later builds).
	NoCache bool
	// BaseDir is where relative copy sources are: the blueprint file's
	// directory.
	BaseDir string
}

// Build builds bp into the template name and returns it. It resumes from
// the snapshot of the longest cached prefix of steps, runs the rest in a
// build sandbox, snapshotting after each step (kind "step", with the
// step's cache key), names the last snapshot as the template, and always
// deletes the build sandbox. A failed step is a *StepError; a run step
// that exits non-zero wraps a *RunError.
func Build(ctx context.Context, c *client.Client, name string, bp Blueprint, opts BuildOptions) (client.Template, error) {
	if name == "" {
		return client.Template{}, errors.New("blueprint: the template needs a name")
	}
	if err := bp.Validate(); err != nil {
		return client.Template{}, err
	}
	b := &builder{c: c, bp: bp, out: orDiscard(opts.Out), errw: orDiscard(opts.Err), n: len(bp.Steps)}
	var tmplSnap string
	if bp.Template != "" {
		t, err := c.GetTemplate(ctx, bp.Template)
		if err != nil {
			return client.Template{}, fmt.Errorf("blueprint: template %s: %w", bp.Template, err)
		}
		tmplSnap = t.SnapshotID
	}
	keys, trees, err := plan(bp, opts.BaseDir, tmplSnap)
	if err != nil {
		return client.Template{}, err
	}
	b.keys, b.trees = keys, trees
	start, snap := 0, ""
	if !opts.NoCache {
		if start, snap, err = b.cached(ctx); err != nil {
			return client.Template{}, err
		}
	}
	fmt.Fprintf(b.out, "FROM %s\n", bp.origin(tmplSnap))
	for i := range start {
		fmt.Fprintf(b.out, "[%d/%d] CACHED %s\n", i+1, b.n, bp.Steps[i])
	}
	if snap == "" || start < b.n {
		last, err := b.run(ctx, start, snap, tmplSnap)
		var ce *cacheError
		if errors.As(err, &ce) && ctx.Err() == nil {
			fmt.Fprintf(b.errw, "blueprint: %v; building every step\n", ce)
			last, err = b.run(ctx, 0, "", tmplSnap)
		}
		if err != nil {
			return client.Template{}, err
		}
		snap = last
	}
	return b.name(ctx, name, snap, opts.Pool)
}

// name makes snap the template name, unless it already is (which would
// only recycle the template's warm pool).
func (b *builder) name(ctx context.Context, name, snap string, pool int) (client.Template, error) {
	if t, err := b.c.GetTemplate(ctx, name); err == nil && t.SnapshotID == snap && t.PoolSize == pool {
		fmt.Fprintf(b.out, "=> template %s unchanged (snapshot %s, pool %d)\n", t.Name, t.SnapshotID, t.PoolSize)
		return t, nil
	}
	t, err := b.c.CreateTemplate(ctx, client.CreateTemplateRequest{Name: name, SnapshotID: snap, PoolSize: pool})
	if err != nil {
		return client.Template{}, fmt.Errorf("blueprint: create template %s: %w", name, err)
	}
	fmt.Fprintf(b.out, "=> template %s (snapshot %s, pool %d)\n", t.Name, t.SnapshotID, t.PoolSize)
	return t, nil
}

func orDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// builder is one build's state.
type builder struct {
	c         *client.Client
	bp        Blueprint
	out, errw io.Writer
	n         int
	keys      []string      // keys[0] the origin's, keys[i] step i's
	trees     map[int]*tree // copy sources by 0-based step
}

// cached finds the longest prefix of steps with a step snapshot: it
// returns how many steps it covers and the snapshot ("" for none). With
// no steps, a snapshot of the bare origin counts.
func (b *builder) cached(ctx context.Context) (int, string, error) {
	sns, err := b.c.ListSnapshots(ctx)
	if err != nil {
		return 0, "", fmt.Errorf("blueprint: list snapshots: %w", err)
	}
	byKey := map[string]client.Snapshot{}
	for _, sn := range sns {
		if sn.Kind != string(client.SnapshotRequestKindStep) || sn.CacheKey == "" {
			continue
		}
		if old, ok := byKey[sn.CacheKey]; !ok || sn.CreatedAt.After(old.CreatedAt) {
			byKey[sn.CacheKey] = sn
		}
	}
	lowest := 1
	if b.n == 0 {
		lowest = 0
	}
	for i := b.n; i >= lowest; i-- {
		if sn, ok := byKey[b.keys[i]]; ok {
			return i, sn.ID, nil
		}
	}
	return 0, "", nil
}

// run starts the build sandbox (from snap if set, else from the origin),
// runs steps start.. and returns the last step's snapshot.
func (b *builder) run(ctx context.Context, start int, snap, tmplSnap string) (last string, err error) {
	sb, err := b.startSandbox(ctx, snap, tmplSnap)
	if err != nil {
		return "", err
	}
	defer b.deleteSandbox(ctx, sb.ID)
	st := replay(b.bp.Steps[:start])
	for i := start; i < b.n; i++ {
		s := b.bp.Steps[i]
		fmt.Fprintf(b.out, "[%d/%d] %s\n", i+1, b.n, s)
		if err := b.step(ctx, sb.ID, i, &st); err != nil {
			return "", &StepError{Step: i + 1, Err: fmt.Errorf("%s: %w", s, err)}
		}
		if last, err = b.snapshot(ctx, sb.ID, b.keys[i+1], st); err != nil {
			return "", &StepError{Step: i + 1, Err: err}
		}
	}
	if b.n == 0 {
		return b.snapshot(ctx, sb.ID, b.keys[0], st)
	}
	return last, nil
}

func (b *builder) startSandbox(ctx context.Context, snap, tmplSnap string) (client.Sandbox, error) {
	req := client.CreateSandboxRequest{VCPUs: b.bp.VCPUs, MemoryMiB: b.bp.MemoryMiB}
	what := "base " + b.bp.Base
	switch {
	case snap != "":
		req = client.CreateSandboxRequest{Snapshot: snap}
	case b.bp.Template != "":
		req = client.CreateSandboxRequest{Template: b.bp.Template}
		what = "template " + b.bp.Template
	}
	sb, err := b.c.CreateSandbox(ctx, req)
	if err != nil && snap != "" {
		return sb, &cacheError{snap: snap, err: err}
	}
	if err != nil {
		return sb, fmt.Errorf("blueprint: start the build sandbox from %s: %w", what, err)
	}
	if snap == "" && b.bp.Template != "" && sb.SnapshotID != "" && sb.SnapshotID != tmplSnap {
		b.deleteSandbox(ctx, sb.ID)
		return sb, fmt.Errorf("blueprint: template %s changed during the build (snapshot %s, was %s); build again", b.bp.Template, sb.SnapshotID, tmplSnap)
	}
	return sb, nil
}

// cacheError is a cached step snapshot that a sandbox could not start
// from (say, snapshot_corrupt); Build then runs every step instead.
type cacheError struct {
	snap string
	err  error
}

func (e *cacheError) Error() string {
	return fmt.Sprintf("cannot start from cached snapshot %s: %v", e.snap, e.err)
}
func (e *cacheError) Unwrap() error { return e.err }

// deleteSandbox deletes the build sandbox even when ctx is cancelled. A
// failure is reported on Err and does not fail the build.
func (b *builder) deleteSandbox(ctx context.Context, id string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := b.c.DeleteSandbox(dctx, id); err != nil {
		fmt.Fprintf(b.errw, "blueprint: delete build sandbox %s: %v\n", id, err)
	}
}

// snapshot takes step snapshot key; sandboxes started from it (the
// template's) get the env and workdir that the steps so far set.
func (b *builder) snapshot(ctx context.Context, id, key string, st state) (string, error) {
	sn, err := b.c.Snapshot(ctx, id, client.SnapshotRequest{Kind: client.SnapshotRequestKindStep, CacheKey: key, Env: st.env, Cwd: st.workdir, User: st.user})
	if err != nil {
		return "", fmt.Errorf("snapshot: %w", err)
	}
	return sn.ID, nil
}

// state is what env, workdir and user steps accumulate for later run
// steps.
type state struct {
	env     map[string]string
	workdir string
	user    string // "" = the origin's (its image's USER, else root)
}

// replay returns the state after steps (already built, so not run).
func replay(steps []Step) state {
	var st state
	for _, s := range steps {
		st.apply(s)
	}
	return st
}

func (st *state) apply(s Step) {
	switch s.Kind() {
	case KindEnv:
		if st.env == nil {
			st.env = map[string]string{}
		}
		maps.Copy(st.env, s.Env)
	case KindWorkdir:
		st.workdir = s.Workdir
	case KindUser:
		st.user = s.User
	}
}
