package commands

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/agentbox/agentbox/client/dockerfile"
)

// isDockerfile reports whether -f names a Dockerfile rather than a blueprint.
func isDockerfile(file string) bool {
	base := filepath.Base(file)
	return base == "Dockerfile" || base == "Containerfile" || strings.HasPrefix(base, "Dockerfile.") ||
		strings.HasSuffix(base, ".Dockerfile") || strings.HasSuffix(base, ".dockerfile")
}

// buildDockerfile is template build -f Dockerfile NAME [CONTEXT].
func buildDockerfile(ctx context.Context, cmd *cli.Command, file string) error {
	if n := cmd.Args().Len(); n < 1 || n > 2 {
		return fmt.Errorf("%s: give the template's name and optionally the build context", cmd.Name)
	}
	if cmd.String("image") != "" {
		return fmt.Errorf("%s: --image and a Dockerfile are exclusive (use FROM in the Dockerfile)", cmd.Name)
	}
	if cmd.Int("pool") < 0 {
		return fmt.Errorf("build: --pool %d is negative", cmd.Int("pool"))
	}
	args := map[string]string{}
	for _, kv := range cmd.StringSlice("build-arg") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("%s: --build-arg %q is not K=V", cmd.Name, kv)
		}
		args[k] = v
	}
	c, err := newClient(cmd)
	if err != nil {
		return err
	}
	img, err := imageSource(cmd)
	if err != nil {
		return err
	}
	opts := dockerfile.BuildOptions{Context: cmd.Args().Get(1), BuildArgs: args, Out: stderr(cmd), Err: stderr(cmd),
		Pool: int(cmd.Int("pool")), NoCache: cmd.Bool("no-cache"), Image: img}
	if opts.Context == "" {
		opts.Context = filepath.Dir(file)
	}
	if !cmd.Bool("json") {
		p := &buildBars{w: stderr(cmd)}
		defer p.finish()
		opts.ImageProgress = p.show
	}
	t, err := dockerfile.Build(ctx, c, cmd.Args().First(), file, opts)
	if err != nil {
		return err
	}
	return printResult(cmd, t, t.Name)
}
