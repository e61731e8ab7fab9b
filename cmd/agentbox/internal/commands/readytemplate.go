package commands

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/urfave/cli/v3"

	"github.com/agentbox/agentbox/client"
)

// readyTemplateDir finds the ready template name (images/templates/NAME
// with a recipe) in the agentbox checkout that holds the working directory
// or this executable (bin/agentbox); "" when there is none.
func readyTemplateDir(name string) string {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, dir := range starts {
		for d := dir; ; d = filepath.Dir(d) {
			if st, err := os.Stat(filepath.Join(d, "images", "templates", name, "recipe")); err == nil && st.Mode().IsRegular() {
				if _, err := os.Stat(filepath.Join(d, "images", "build-template.sh")); err == nil {
					return d
				}
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return ""
}

// buildReadyTemplate is `template build NAME` for a ready template of the
// checkout root: images/build-template.sh builds (or finds cached) its OCI
// layout in the asset cache, its phases streamed to stderr, then hostd
// builds the template from that layout, with progress bars. The layout's
// directory must be one of hostd's image import directories.
func buildReadyTemplate(ctx context.Context, cmd *cli.Command, root, name string) (client.Template, error) {
	fmt.Fprintf(stderr(cmd), "building the %s layout (images/build-template.sh)\n", name)
	sh := exec.CommandContext(ctx, "bash", filepath.Join(root, "images", "build-template.sh"), name)
	sh.Dir, sh.Stdout, sh.Stderr = root, stderr(cmd), stderr(cmd)
	if err := sh.Run(); err != nil {
		return client.Template{}, fmt.Errorf("build the %s layout: %w", name, err)
	}
	cache := os.Getenv("AGENTBOX_CACHE")
	if cache == "" {
		cache = "/var/cache/agentbox"
	}
	layout, err := filepath.Abs(filepath.Join(cache, "templates", name))
	if err != nil {
		return client.Template{}, err
	}
	if err := cmd.Set("image", layout); err != nil {
		return client.Template{}, err
	}
	c, err := newClient(cmd)
	if err != nil {
		return client.Template{}, err
	}
	fmt.Fprintf(stderr(cmd), "building template %s from %s\n", name, layout)
	return buildFromImage(ctx, cmd, c, name)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
