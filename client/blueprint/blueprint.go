// Package blueprint reads template blueprints (YAML) and builds them into
// hostd templates through the Go client, step by step, with every step
// snapshotted under a cache key so that a rebuild resumes after the longest
// unchanged prefix.
//
// A blueprint:
//
//	base: debian-bookworm        # or `template: NAME` to build on a template
//	vcpus: 1                     # optional (base only)
//	memory_mib: 512              # optional (base only)
//	steps:
//	  - run: apt-get install -y jq          # sh -c, must exit 0
//	  - copy: {src: ./app, dest: /opt/app}  # relative to the blueprint file
//	  - env: {FOO: bar}
//	  - workdir: /opt/app
//	  - user: app                           # later run steps and the template's execs
//
// There is no API to change a sandbox's default env or cwd, so env and
// workdir steps are also written into the guest: env steps append
// `export K='V'` lines to /etc/profile.d/agentbox-template.sh, and a workdir
// step creates the directory and writes its path to /etc/agentbox-workdir.
// During a build they are passed as ExecRequest.Env and Cwd to every later
// run step. A user step changes no file: later run steps run as that user
// (ExecRequest.User) and the step's snapshot records it as the default user
// of the template's execs.
package blueprint

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/moby/patternmatcher"
	"go.yaml.in/yaml/v3"
)

// Bases are the base images hostd can boot.
var Bases = []string{"debian-bookworm"}

// Guest files written by env and workdir steps.
const (
	ProfileFile = "/etc/profile.d/agentbox-template.sh"
	WorkdirFile = "/etc/agentbox-workdir"
)

// Blueprint is a parsed blueprint. Exactly one of Base and Template is set.
type Blueprint struct {
	Base      string `yaml:"base,omitempty"`
	Template  string `yaml:"template,omitempty"`
	VCPUs     int    `yaml:"vcpus,omitempty"`
	MemoryMiB int    `yaml:"memory_mib,omitempty"`
	Steps     []Step `yaml:"steps,omitempty"`
}

// Step is one build step. Exactly one of its fields is set.
type Step struct {
	// Run is a shell command, run with sh -c; it must exit 0.
	Run string `yaml:"run,omitempty"`
	// Copy copies a local file or directory into the guest.
	Copy *Copy `yaml:"copy,omitempty"`
	// Env sets variables for later steps and the template's sandboxes.
	Env map[string]string `yaml:"env,omitempty"`
	// Workdir is the working directory of later run steps.
	Workdir string `yaml:"workdir,omitempty"`
	// User is the user later run steps and the template's execs run as
	// ("root", a name or uid, optionally ":group"; a Dockerfile's USER).
	User string `yaml:"user,omitempty"`

	// Exec is a command run as an argv, without a shell (a Dockerfile's
	// exec-form RUN); it must exit 0.
	Exec []string `yaml:"-"`
	// File writes a guest file (a Dockerfile's recorded config).
	File *File `yaml:"-"`
	// RunEnv is added to the env of this run or exec step only (a
	// Dockerfile's ARGs); it is part of the step's cache key.
	RunEnv map[string]string `yaml:"-"`
	// Label, if set, is how progress shows the step (a Dockerfile's
	// instruction); it is not part of the cache key.
	Label string `yaml:"-"`
}

// File is a file step: Content written to the absolute guest path Path
// (mode 0644, parents created).
type File struct {
	Path    string
	Content string
}

// Copy is a copy step. Src is a local path, relative to the blueprint's
// directory unless absolute; Dest is an absolute guest path. A file is
// copied to Dest (or into it, if Dest ends in "/"); a directory's contents
// are copied into Dest, which is created.
type Copy struct {
	Src  string `yaml:"src"`
	Dest string `yaml:"dest"`
	// Ignore, if set, leaves out what it matches (a .dockerignore), by
	// path relative to the build's BaseDir.
	Ignore *patternmatcher.PatternMatcher `yaml:"-"`
}

// Step kinds, as Kind returns them.
const (
	KindRun     = "run"
	KindCopy    = "copy"
	KindEnv     = "env"
	KindWorkdir = "workdir"
	KindUser    = "user"
	KindExec    = "exec"
	KindFile    = "file"
)

// Kind returns the step's kind ("run", "copy", "env", "workdir"), or "" if
// it is not exactly one.
func (s Step) Kind() string {
	var kinds []string
	if s.Run != "" {
		kinds = append(kinds, KindRun)
	}
	if s.Copy != nil {
		kinds = append(kinds, KindCopy)
	}
	if s.Env != nil {
		kinds = append(kinds, KindEnv)
	}
	if s.Workdir != "" {
		kinds = append(kinds, KindWorkdir)
	}
	if s.User != "" {
		kinds = append(kinds, KindUser)
	}
	if s.Exec != nil {
		kinds = append(kinds, KindExec)
	}
	if s.File != nil {
		kinds = append(kinds, KindFile)
	}
	if len(kinds) != 1 {
		return ""
	}
	return kinds[0]
}

// String is the step as progress shows it, e.g. "RUN apt-get install -y jq".
func (s Step) String() string {
	if s.Label != "" {
		return s.Label
	}
	switch s.Kind() {
	case KindRun:
		line, rest, _ := strings.Cut(strings.TrimSpace(s.Run), "\n")
		if strings.TrimSpace(rest) != "" {
			line += " ..."
		}
		return "RUN " + line
	case KindCopy:
		return "COPY " + s.Copy.Src + " " + s.Copy.Dest
	case KindEnv:
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(s.Env)) {
			kv = append(kv, k+"="+s.Env[k])
		}
		return "ENV " + strings.Join(kv, " ")
	case KindWorkdir:
		return "WORKDIR " + s.Workdir
	case KindUser:
		return "USER " + s.User
	case KindExec:
		return "RUN " + strings.Join(s.Exec, " ")
	case KindFile:
		return "FILE " + s.File.Path
	}
	return "INVALID"
}

// StepError is an error of one step, numbered from 1.
type StepError struct {
	Step int
	Err  error
}

func (e *StepError) Error() string { return fmt.Sprintf("blueprint: step %d: %v", e.Step, e.Err) }
func (e *StepError) Unwrap() error { return e.Err }

// ParseFile reads and validates the blueprint at name.
func ParseFile(name string) (Blueprint, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return Blueprint{}, fmt.Errorf("blueprint: %w", err)
	}
	bp, err := Parse(b)
	if err != nil {
		return Blueprint{}, fmt.Errorf("%s: %w", name, err)
	}
	return bp, nil
}

// Parse reads and validates a blueprint. Unknown keys are errors.
func Parse(b []byte) (Blueprint, error) {
	var raw struct {
		Base      string      `yaml:"base"`
		Template  string      `yaml:"template"`
		VCPUs     int         `yaml:"vcpus"`
		MemoryMiB int         `yaml:"memory_mib"`
		Steps     []yaml.Node `yaml:"steps"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&raw); err != nil && !errors.Is(err, io.EOF) {
		return Blueprint{}, fmt.Errorf("blueprint: %w", err)
	}
	bp := Blueprint{Base: raw.Base, Template: raw.Template, VCPUs: raw.VCPUs, MemoryMiB: raw.MemoryMiB}
	for i := range raw.Steps {
		s, err := parseStep(&raw.Steps[i])
		if err != nil {
			return Blueprint{}, &StepError{Step: i + 1, Err: err}
		}
		bp.Steps = append(bp.Steps, s)
	}
	return bp, bp.Validate()
}

// parseStep reads one step: a mapping with exactly one known key.
func parseStep(n *yaml.Node) (Step, error) {
	if n.Kind != yaml.MappingNode || len(n.Content) != 2 {
		return Step{}, fmt.Errorf("line %d: a step is a mapping with one key: run, copy, env, workdir or user", n.Line)
	}
	key, val := n.Content[0].Value, n.Content[1]
	var s Step
	switch key {
	case KindRun, KindWorkdir, KindUser:
		if val.Kind != yaml.ScalarNode || strings.TrimSpace(val.Value) == "" {
			return Step{}, fmt.Errorf("line %d: %s takes a non-empty string", val.Line, key)
		}
		switch key {
		case KindRun:
			s.Run = val.Value
		case KindWorkdir:
			s.Workdir = val.Value
		default:
			s.User = val.Value
		}
	case KindCopy:
		if err := decodeStrict(val, &s.Copy, "src", "dest"); err != nil {
			return Step{}, fmt.Errorf("line %d: copy takes {src: LOCAL, dest: /GUEST}: %w", val.Line, err)
		}
	case KindEnv:
		if val.Kind != yaml.MappingNode {
			return Step{}, fmt.Errorf("line %d: env takes a mapping of NAME: value", val.Line)
		}
		if err := val.Decode(&s.Env); err != nil {
			return Step{}, fmt.Errorf("line %d: env: %w", val.Line, err)
		}
		if s.Env == nil {
			s.Env = map[string]string{}
		}
	default:
		return Step{}, fmt.Errorf("line %d: unknown step %q (want run, copy, env or workdir)", n.Line, key)
	}
	return s, nil
}

// decodeStrict decodes mapping n into v, refusing keys other than known.
func decodeStrict(n *yaml.Node, v any, known ...string) error {
	if n.Kind != yaml.MappingNode {
		return errors.New("not a mapping")
	}
	for i := 0; i < len(n.Content); i += 2 {
		if k := n.Content[i].Value; !slices.Contains(known, k) {
			return fmt.Errorf("unknown key %q", k)
		}
	}
	return n.Decode(v)
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate checks the blueprint without touching the filesystem.
func (bp Blueprint) Validate() error {
	switch {
	case bp.Base == "" && bp.Template == "":
		return fmt.Errorf("blueprint: give a base (%s) or a template", strings.Join(Bases, ", "))
	case bp.Base != "" && bp.Template != "":
		return errors.New("blueprint: give a base or a template, not both")
	case bp.Base != "" && !slices.Contains(Bases, bp.Base):
		return fmt.Errorf("blueprint: unknown base %q (hostd has %s)", bp.Base, strings.Join(Bases, ", "))
	case bp.Template != "" && (bp.VCPUs != 0 || bp.MemoryMiB != 0):
		return errors.New("blueprint: vcpus and memory_mib come from the template; drop them")
	case bp.VCPUs < 0 || bp.MemoryMiB < 0:
		return errors.New("blueprint: vcpus and memory_mib must not be negative")
	}
	for i, s := range bp.Steps {
		if err := s.Validate(); err != nil {
			return &StepError{Step: i + 1, Err: err}
		}
	}
	return nil
}

// Validate checks one step on its own, as Blueprint.Validate does each.
func (s Step) Validate() error {
	switch s.Kind() {
	case KindRun:
		if strings.TrimSpace(s.Run) == "" {
			return errors.New("run: empty command")
		}
	case KindCopy:
		switch {
		case s.Copy.Src == "":
			return errors.New("copy: src is empty")
		case !path.IsAbs(s.Copy.Dest):
			return fmt.Errorf("copy: dest must be an absolute guest path, got %q", s.Copy.Dest)
		}
	case KindEnv:
		if len(s.Env) == 0 {
			return errors.New("env: no variables")
		}
		for k := range s.Env {
			if !envName.MatchString(k) {
				return fmt.Errorf("env: %q is not a variable name", k)
			}
		}
	case KindWorkdir:
		if !path.IsAbs(s.Workdir) {
			return fmt.Errorf("workdir: must be an absolute guest path, got %q", s.Workdir)
		}
	case KindUser:
		if name, group, _ := strings.Cut(s.User, ":"); name == "" || strings.ContainsAny(group, ":") ||
			strings.ContainsFunc(s.User, func(r rune) bool { return r <= ' ' }) {
			return fmt.Errorf("user: %q is not root, a name or uid, optionally :group", s.User)
		}
	case KindExec:
		if len(s.Exec) == 0 || s.Exec[0] == "" {
			return errors.New("exec: empty argv")
		}
	case KindFile:
		if !path.IsAbs(s.File.Path) {
			return fmt.Errorf("file: must be an absolute guest path, got %q", s.File.Path)
		}
	default:
		return errors.New("a step needs exactly one of run, copy, env, workdir or user")
	}
	return nil
}
