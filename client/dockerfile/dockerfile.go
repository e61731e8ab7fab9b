// Package dockerfile builds templates from Dockerfiles: it parses one with
// BuildKit's parser and instruction parser (not its solver), translates
// the instructions into blueprint steps and builds them with the blueprint
// engine (client/blueprint), so each instruction is cached by content like
// a blueprint step and a changed line rebuilds from there.
//
// FROM names where the build starts:
//
//   - `FROM template:NAME` — the template NAME;
//   - `FROM base:NAME` — a hostd base image (debian-bookworm);
//   - `FROM NAME` where NAME is an existing template — that template;
//   - anything else is an OCI image reference (a registry reference, or a
//     path on hostd's machine of an OCI layout or `docker save` tarball):
//     its image template (named "image-" and a hash of the reference) is
//     built once and reused by later builds.
//
// RUN (shell form under /bin/sh -c, exec form as an argv), COPY and ADD
// from the context (honouring its .dockerignore, through
// moby/patternmatcher), ENV, ARG (with build args), WORKDIR and USER are
// steps (later RUN lines, and the template's execs, run as USER's user,
// resolved in the guest); USER, EXPOSE, CMD, ENTRYPOINT and LABEL are also
// recorded, as JSON, in the guest file ConfigFile (one last step).
// Everything else — multi-stage
// builds, RUN and COPY flags (--mount, --from, --chown, ...), heredocs,
// ADD of a URL or of a local archive, HEALTHCHECK, ONBUILD, VOLUME,
// STOPSIGNAL, SHELL — is an error naming the line.
package dockerfile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"

	"github.com/agentbox/agentbox/client/blueprint"
	"github.com/agentbox/agentbox/images/imageconfig"
)

// ConfigFile is the guest file where a build records the Dockerfile's
// config (USER, CMD, ENTRYPOINT, EXPOSE, LABEL, and the ENV and WORKDIR).
const ConfigFile = imageconfig.GuestFile

// Config is what a Dockerfile sets for its template's sandboxes (the
// image config that hostd also reads, so it lives in images/imageconfig).
type Config = imageconfig.Config

// File is a parsed Dockerfile of one stage.
type File struct {
	// From is the FROM line's argument, with build args expanded.
	From string
	// FromLine is its line number.
	FromLine int

	stage   instructions.Stage
	escape  rune
	args    map[string]string // build args given
	metaEnv map[string]string // ARGs before FROM, as expanded
}

// LineError is an error of one line of the Dockerfile.
type LineError struct {
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("dockerfile: line %d: %v", e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// Parse parses a Dockerfile; buildArgs are its --build-arg values.
func Parse(src []byte, buildArgs map[string]string) (*File, error) {
	res, err := parser.Parse(bytes.NewReader(src))
	if err != nil {
		return nil, fmt.Errorf("dockerfile: %w", err)
	}
	stages, metaArgs, err := instructions.Parse(res.AST, nil)
	if err != nil {
		return nil, fmt.Errorf("dockerfile: %w", err)
	}
	if len(stages) == 0 {
		return nil, errors.New("dockerfile: no FROM")
	}
	if len(stages) > 1 {
		return nil, &LineError{Line: line(stages[1].Location), Err: errors.New("a second FROM: multi-stage builds are not supported")}
	}
	f := &File{stage: stages[0], escape: res.EscapeToken, args: buildArgs, metaEnv: map[string]string{}}
	f.FromLine = line(f.stage.Location)
	lex := shell.NewLex(f.escape)
	for _, a := range metaArgs {
		if err := f.declare(lex, a, f.metaEnv, f.metaEnv); err != nil {
			return nil, &LineError{Line: line(a.Location()), Err: err}
		}
	}
	if f.stage.Platform != "" {
		return nil, &LineError{Line: f.FromLine, Err: errors.New("FROM --platform is not supported")}
	}
	from, _, err := lex.ProcessWord(f.stage.BaseName, envOf(f.metaEnv))
	if err != nil {
		return nil, &LineError{Line: f.FromLine, Err: err}
	}
	f.From = from
	return f, nil
}

// declare adds ARG a's variables to into, expanding defaults with env.
func (f *File) declare(lex *shell.Lex, a instructions.ArgCommand, env, into map[string]string) error {
	for _, kv := range a.Args {
		if v, ok := f.args[kv.Key]; ok {
			into[kv.Key] = v
			continue
		}
		if kv.Value == nil {
			continue
		}
		v, _, err := lex.ProcessWord(*kv.Value, envOf(env))
		if err != nil {
			return err
		}
		into[kv.Key] = v
	}
	return nil
}

func envOf(m map[string]string) shell.EnvGetter {
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		kv = append(kv, k+"="+m[k])
	}
	return shell.EnvsFromSlice(kv)
}

func line(r []parser.Range) int {
	if len(r) == 0 {
		return 0
	}
	return r[0].Start.Line
}

// Translation is a Dockerfile as blueprint steps and the config it sets.
type Translation struct {
	Steps  []blueprint.Step
	Config Config
}

// Translate turns the stage's instructions into blueprint steps. base is
// the FROM's config (an image's), which the Dockerfile's instructions
// change; context is the build context directory, for COPY and ADD
// sources and .dockerignore.
func (f *File) Translate(context string, base Config) (Translation, error) {
	ctx, err := openContext(context)
	if err != nil {
		return Translation{}, err
	}
	t := &translator{f: f, lex: shell.NewLex(f.escape), ctx: ctx, env: maps.Clone(base.Env), args: map[string]string{},
		workdir: base.WorkingDir, cfg: base}
	t.cfg.Labels = maps.Clone(base.Labels)
	if t.env == nil {
		t.env = map[string]string{}
	}
	if t.workdir == "" {
		t.workdir = "/"
	}
	for _, c := range f.stage.Commands {
		if err := t.commandValid(c); err != nil {
			return Translation{}, &LineError{Line: line(c.Location()), Err: err}
		}
	}
	return t.finish()
}

// translator is one translation's state.
type translator struct {
	f       *File
	lex     *shell.Lex
	ctx     *buildContext
	env     map[string]string // ENV so far (with the base's)
	args    map[string]string // ARGs in scope
	workdir string
	cfg     Config
	setCfg  bool // an instruction set something of cfg
	steps   []blueprint.Step
}

// commandValid translates one instruction and checks the steps it made,
// so a step the blueprint would refuse (USER "0 0") fails on its line.
func (t *translator) commandValid(c instructions.Command) error {
	n := len(t.steps)
	if err := t.command(c); err != nil {
		return err
	}
	for _, s := range t.steps[n:] {
		if err := s.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// expander expands words with ARGs, then ENV on top (ENV wins).
func (t *translator) expander() instructions.SingleWordExpander {
	env := maps.Clone(t.args)
	maps.Copy(env, t.env)
	g := envOf(env)
	return func(word string) (string, error) {
		s, _, err := t.lex.ProcessWord(word, g)
		return s, err
	}
}

func (t *translator) command(c instructions.Command) error {
	if e, ok := c.(instructions.SupportsSingleWordExpansion); ok {
		if _, isRun := c.(*instructions.RunCommand); !isRun {
			if err := e.Expand(t.expander()); err != nil {
				return err
			}
		}
	}
	switch c := c.(type) {
	case *instructions.RunCommand:
		return t.run(c)
	case *instructions.CopyCommand:
		return t.copy(c)
	case *instructions.AddCommand:
		return t.add(c)
	case *instructions.EnvCommand:
		env := map[string]string{}
		for _, kv := range c.Env {
			if !envName.MatchString(kv.Key) {
				return fmt.Errorf("ENV %q is not a variable name", kv.Key)
			}
			env[kv.Key] = kv.Value
		}
		maps.Copy(t.env, env)
		t.steps = append(t.steps, blueprint.Step{Env: env, Label: c.String()})
	case *instructions.ArgCommand:
		return t.f.declare(t.lex, *c, t.env, t.args)
	case *instructions.WorkdirCommand:
		t.workdir = t.abs(c.Path)
		t.steps = append(t.steps, blueprint.Step{Workdir: t.workdir, Label: c.String()})
	case *instructions.UserCommand:
		// Later RUN lines and the template's execs run as the user.
		if c.User == "" {
			return errors.New("USER names no user")
		}
		t.cfg.User, t.setCfg = c.User, true
		t.steps = append(t.steps, blueprint.Step{User: c.User, Label: c.String()})
	default:
		return t.record(c)
	}
	return nil
}

// record notes the instructions that only set config.
func (t *translator) record(c instructions.Command) error {
	switch c := c.(type) {
	case *instructions.ExposeCommand:
		t.cfg.ExposedPorts = append(t.cfg.ExposedPorts, c.Ports...)
	case *instructions.CmdCommand:
		t.cfg.Cmd = t.argv(c.ShellDependantCmdLine)
	case *instructions.EntrypointCommand:
		t.cfg.Entrypoint = t.argv(c.ShellDependantCmdLine)
	case *instructions.LabelCommand:
		if t.cfg.Labels == nil {
			t.cfg.Labels = map[string]string{}
		}
		for _, kv := range c.Labels {
			t.cfg.Labels[kv.Key] = kv.Value
		}
	default:
		return fmt.Errorf("%s is not supported", strings.ToUpper(c.Name()))
	}
	t.setCfg = true
	return nil
}

// argv is a CMD's or ENTRYPOINT's command line as an argv.
func (t *translator) argv(c instructions.ShellDependantCmdLine) []string {
	if c.PrependShell {
		return append([]string{"/bin/sh", "-c"}, strings.Join(c.CmdLine, " "))
	}
	return slices.Clone(c.CmdLine)
}

func (t *translator) run(c *instructions.RunCommand) error {
	switch {
	case len(c.FlagsUsed) > 0:
		return fmt.Errorf("RUN --%s is not supported", c.FlagsUsed[0])
	case len(c.Files) > 0:
		return errors.New("RUN with a heredoc is not supported")
	case c.PrependShell && strings.TrimSpace(strings.Join(c.CmdLine, " ")) == "",
		!c.PrependShell && (len(c.CmdLine) == 0 || c.CmdLine[0] == ""):
		return errors.New("RUN with an empty command")
	}
	s := blueprint.Step{Label: c.String()}
	if len(t.args) > 0 {
		s.RunEnv = maps.Clone(t.args)
	}
	if c.PrependShell {
		s.Run = strings.Join(c.CmdLine, " ")
	} else {
		s.Exec = slices.Clone(c.CmdLine)
	}
	t.steps = append(t.steps, s)
	return nil
}

// envName is what blueprint env steps accept (and sh can export).
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// abs resolves a guest path against the working directory.
func (t *translator) abs(p string) string {
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	return path.Join(t.workdir, p)
}

// finish appends the config step, if any instruction set config.
func (t *translator) finish() (Translation, error) {
	if t.setCfg {
		t.cfg.WorkingDir = t.workdir
		if len(t.env) > 0 {
			t.cfg.Env = t.env
		}
		b, err := json.MarshalIndent(t.cfg, "", "  ")
		if err != nil {
			return Translation{}, fmt.Errorf("dockerfile: %w", err)
		}
		t.steps = append(t.steps, blueprint.Step{File: &blueprint.File{Path: ConfigFile, Content: string(b) + "\n"},
			Label: "record USER, CMD, ENTRYPOINT, EXPOSE, LABEL in " + ConfigFile})
	}
	t.cfg.WorkingDir, t.cfg.Env = t.workdir, t.env
	return Translation{Steps: t.steps, Config: t.cfg}, nil
}
