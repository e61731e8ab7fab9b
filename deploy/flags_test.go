package deploy

import (
	"context"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// helpText is what one command's --help says: its flags, the AGENTBOX_*
// variables it mentions, and its subcommands.
type helpText struct {
	ok       bool // the command exists (its --help exited 0)
	out      string
	flags    map[string]bool
	env      map[string]bool
	commands map[string]bool
}

var (
	envRe  = regexp.MustCompile(`AGENTBOX_[A-Z0-9_]+`)
	flagRe = regexp.MustCompile(`--[a-z][a-z0-9-]*`)
	cmdRe  = regexp.MustCompile(`^\s{2,}([a-z][a-z0-9-]*)(,|\s{2,})`)
)

// parseHelp reads urfave/cli's help: option lines start with "-" (the
// flag's names are in the first column), command lines sit under
// "COMMANDS:".
func parseHelp(out string) helpText {
	h := helpText{ok: true, out: out, flags: map[string]bool{}, env: map[string]bool{}, commands: map[string]bool{}}
	for _, v := range envRe.FindAllString(out, -1) {
		h.env[v] = true
	}
	section := ""
	for _, line := range strings.Split(out, "\n") {
		if strings.HasSuffix(line, ":") && !strings.HasPrefix(line, " ") {
			section = line
			continue
		}
		trim := strings.TrimSpace(line)
		if strings.HasPrefix(trim, "-") {
			first, _, _ := strings.Cut(trim, "  ")
			for _, f := range flagRe.FindAllString(first, -1) {
				h.flags[f] = true
			}
		}
		if section == "COMMANDS:" {
			if m := cmdRe.FindStringSubmatch(line); m != nil {
				h.commands[m[1]] = true
			}
		}
	}
	return h
}

// binaries builds cmd/hostd and cmd/agentbox and answers `--help` for a
// command line of either, e.g. ("agentbox", "host", "drain").
type binaries struct {
	t    *testing.T
	dir  string
	seen map[string]helpText
}

func buildBinaries(t *testing.T) *binaries {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go not in PATH: %v", err)
	}
	dir := t.TempDir()
	cmd := exec.CommandContext(t.Context(), goBin, "build", "-o", dir+"/", "./cmd/hostd", "./cmd/agentbox")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return &binaries{t: t, dir: dir, seen: map[string]helpText{}}
}

func (b *binaries) help(ctx context.Context, argv ...string) helpText {
	key := strings.Join(argv, " ")
	if h, ok := b.seen[key]; ok {
		return h
	}
	cmd := exec.CommandContext(ctx, filepath.Join(b.dir, argv[0]), append(argv[1:], "--help")...)
	cmd.Env = []string{"HOME=" + b.dir, "PATH=/usr/bin:/bin"}
	out, err := cmd.CombinedOutput()
	h := parseHelp(string(out))
	h.ok = err == nil
	b.seen[key] = h
	return h
}

// commandLine is a program a manifest runs: its argv and the AGENTBOX_*
// variables a hook's script sets for it (a container's env is checked
// once per container, against all the programs it runs).
type commandLine struct {
	where string
	argv  []string
	env   []string
}

// containerLines returns what a container runs: its command and args, and
// the commands of its lifecycle hooks (a `sh -c` script is read for the
// agentbox and hostd command lines in it).
func containerLines(where string, c corev1.Container) []commandLine {
	main := commandLine{where: where + " " + c.Name, argv: append(slices.Clone(c.Command), c.Args...)}
	lines := []commandLine{main}
	if c.Lifecycle != nil {
		for name, h := range map[string]*corev1.LifecycleHandler{"preStop": c.Lifecycle.PreStop, "postStart": c.Lifecycle.PostStart} {
			if h == nil || h.Exec == nil {
				continue
			}
			lines = append(lines, scriptLines(where+" "+c.Name+" "+name, h.Exec.Command)...)
		}
	}
	return lines
}

var assignRe = regexp.MustCompile(`\b(AGENTBOX_[A-Z0-9_]+)=`)

// scriptLines finds, in an exec hook, the invocations of hostd and
// agentbox and the AGENTBOX_* variables the script sets for them.
func scriptLines(where string, argv []string) []commandLine {
	script := strings.Join(argv, " ")
	if len(argv) >= 3 && path.Base(argv[0]) == "sh" && argv[1] == "-c" {
		script = argv[2]
	}
	var set []string
	for _, m := range assignRe.FindAllStringSubmatch(script, -1) {
		set = append(set, m[1])
	}
	var lines []commandLine
	for _, stmt := range regexp.MustCompile(`[;&|]+`).Split(script, -1) {
		words := strings.Fields(stmt)
		for i, w := range words {
			if b := path.Base(w); b == "agentbox" || b == "hostd" {
				var args []string
				for _, a := range words[i:] {
					args = append(args, strings.Trim(a, `"'`))
				}
				lines = append(lines, commandLine{where: where, argv: args, env: set})
				break
			}
		}
	}
	return lines
}

// check returns what a command line passes that its binary does not
// know, and the helps of the commands on its path (for the env check).
func (b *binaries) check(ctx context.Context, cl commandLine) (missing []string, helps []helpText) {
	bin := path.Base(cl.argv[0])
	cmdPath := []string{bin}
	helps = []helpText{b.help(ctx, bin)}
	if !helps[0].ok {
		return []string{cl.where + ": `" + bin + " --help` fails: " + helps[0].out}, helps
	}
	// The words before the first flag are a command path while the help
	// lists subcommands; after that they are positional arguments.
	var flags []string
	for _, a := range cl.argv[1:] {
		if strings.HasPrefix(a, "-") {
			name, _, _ := strings.Cut(a, "=")
			flags = append(flags, name)
			continue
		}
		cur := helps[len(helps)-1]
		if len(flags) > 0 || len(cur.commands) == 0 {
			break
		}
		if !cur.commands[a] {
			missing = append(missing, cl.where+": `"+strings.Join(cmdPath, " ")+" "+a+"`: no such command")
			break
		}
		cmdPath = append(cmdPath, a)
		h := b.help(ctx, cmdPath...)
		if !h.ok {
			missing = append(missing, cl.where+": `"+strings.Join(cmdPath, " ")+" --help` fails: "+strings.TrimSpace(h.out))
			break
		}
		helps = append(helps, h)
	}
	for _, f := range flags {
		if !slices.ContainsFunc(helps, func(h helpText) bool { return h.flags[f] }) {
			missing = append(missing, cl.where+": flag "+f+" unknown to `"+strings.Join(cmdPath, " ")+"`")
		}
	}
	for _, e := range cl.env {
		if !mentions(helps, e) {
			missing = append(missing, cl.where+": env "+e+" not in `"+strings.Join(cmdPath, " ")+" --help`")
		}
	}
	return missing, helps
}

func mentions(helps []helpText, env string) bool {
	return slices.ContainsFunc(helps, func(h helpText) bool { return h.env[env] })
}

// ours reports whether a container runs the agentbox image (hostd and
// agentbox), whatever registry and tag an overlay gives it.
func ours(image string) bool {
	name, _, _ := strings.Cut(path.Base(image), ":")
	return name == "agentbox"
}

// checkContainer checks a container's command lines, and its AGENTBOX_*
// env against the help of every program in it (hooks inherit the env).
func (b *binaries) checkContainer(ctx context.Context, where string, c corev1.Container) []string {
	if !ours(c.Image) {
		return nil
	}
	if len(c.Command) == 0 {
		return []string{where + " " + c.Name + ": no command (name hostd or agentbox: the check reads its flags)"}
	}
	var missing []string
	var helps []helpText
	for _, cl := range containerLines(where, c) {
		m, h := b.check(ctx, cl)
		missing = append(missing, m...)
		helps = append(helps, h...)
	}
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "AGENTBOX_") && !mentions(helps, e.Name) {
			missing = append(missing, where+" "+c.Name+": env "+e.Name+" mentioned by no --help of the programs it runs")
		}
	}
	return missing
}

// TestFlagsAndEnvExist checks every flag and AGENTBOX_* variable the
// manifests pass (containers, init containers and hooks) against the help
// of the binary that gets it, and lists everything missing at once.
func TestFlagsAndEnvExist(t *testing.T) {
	renders := renderAll(t)
	b := buildBinaries(t)
	in := map[string][]string{} // what is missing -> the kustomizations
	var order []string
	for _, r := range renders {
		for _, o := range r.Objects {
			var spec *corev1.PodSpec
			switch v := o.Value.(type) {
			case *appsv1.DaemonSet:
				spec = &v.Spec.Template.Spec
			case *appsv1.Deployment:
				spec = &v.Spec.Template.Spec
			default:
				continue
			}
			for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
				for _, m := range b.checkContainer(t.Context(), o.Kind+"/"+o.Name, c) {
					if len(in[m]) == 0 {
						order = append(order, m)
					}
					if !slices.Contains(in[m], r.Dir) {
						in[m] = append(in[m], r.Dir)
					}
				}
			}
		}
	}
	if len(order) > 0 {
		var lines []string
		for _, m := range order {
			lines = append(lines, m+" (in "+strings.Join(in[m], ", ")+")")
		}
		t.Errorf("%d flags, variables or commands the manifests pass are unknown to the binaries:\n  %s", len(order), strings.Join(lines, "\n  "))
	}
}

func TestParseHelp(t *testing.T) {
	out := `NAME:
   agentbox - x

COMMANDS:
   create    create a sandbox
   ls, list  list sandboxes

GLOBAL OPTIONS:
   --url string      hostd's API address (default: "http://127.0.0.1:7070") [$AGENTBOX_URL]
   --json            print JSON (mentions AGENTBOX_DATA_DIR)
   --help, -h        show help
`
	h := parseHelp(out)
	for _, f := range []string{"--url", "--json", "--help"} {
		if !h.flags[f] {
			t.Errorf("flag %s not found in %v", f, h.flags)
		}
	}
	if h.flags["--api"] {
		t.Errorf("a flag from the description column: %v", h.flags)
	}
	for _, e := range []string{"AGENTBOX_URL", "AGENTBOX_DATA_DIR"} {
		if !h.env[e] {
			t.Errorf("env %s not found in %v", e, h.env)
		}
	}
	for _, c := range []string{"create", "ls"} {
		if !h.commands[c] {
			t.Errorf("command %s not found in %v", c, h.commands)
		}
	}
}
