package commands

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"

	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v3"

	"github.com/agentbox/agentbox/client"
)

// imageFlags are template build's flags for a build from an OCI image.
func imageFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "image", Usage: "build from an OCI image `REF`: registry/repo:tag, registry/repo@sha256:..., or a path on hostd's machine of an OCI layout or `docker save` tarball"},
		&cli.BoolFlag{Name: "insecure-registry", Usage: "allow plain HTTP to the image's registry"},
		&cli.StringFlag{Name: "registry-secret", Usage: "hostd secret `NAME` holding the registry's user:password"},
		&cli.IntFlag{Name: "free-mib", Usage: "free space of the image's root filesystem (default 1024)"},
		&cli.IntFlag{Name: "memory-mib", Usage: "memory of the template's sandboxes"},
		&cli.StringFlag{Name: "kernel", Usage: "the template's own guest kernel `FILE` (a PVH vmlinux or bzImage, on hostd's machine under an import directory)"},
		&cli.StringFlag{Name: "modules", Usage: "with --kernel, its modules `DIR` (flat .ko files and a modules.order)"},
	}
}

// imageSource is the --image flags' ImageSource (its Ref from --image);
// --kernel and --modules are made absolute, as hostd resolves them.
func imageSource(cmd *cli.Command) (client.ImageSource, error) {
	img := client.ImageSource{Ref: cmd.String("image"), Insecure: cmd.Bool("insecure-registry"),
		RegistrySecret: cmd.String("registry-secret"), FreeMiB: int(cmd.Int("free-mib")), MemoryMiB: int(cmd.Int("memory-mib"))}
	for _, f := range []struct {
		flag string
		to   *string
	}{{"kernel", &img.Kernel}, {"modules", &img.Modules}} {
		if v := cmd.String(f.flag); v != "" {
			abs, err := filepath.Abs(v)
			if err != nil {
				return img, fmt.Errorf("--%s: %w", f.flag, err)
			}
			*f.to = abs
		}
	}
	return img, nil
}

// buildFromImage builds template name from --image, with progress bars on
// stderr (or, with --json, the progress events as JSON lines on stderr).
func buildFromImage(ctx context.Context, cmd *cli.Command, c *client.Client, name string) (client.Template, error) {
	img, err := imageSource(cmd)
	if err != nil {
		return client.Template{}, err
	}
	var show func(client.BuildEvent)
	if cmd.Bool("json") {
		enc := json.NewEncoder(stderr(cmd))
		show = func(ev client.BuildEvent) { _ = enc.Encode(ev) }
	} else {
		p := &buildBars{w: stderr(cmd)}
		defer p.finish()
		show = p.show
	}
	return c.BuildTemplateFromImage(ctx, name, int(cmd.Int("pool")), img, show)
}

// buildBars draws one progress bar per phase (progressbar/v3).
type buildBars struct {
	w     io.Writer
	phase string
	bar   *progressbar.ProgressBar
}

func (p *buildBars) show(ev client.BuildEvent) {
	phase := deref(ev.Phase)
	cur, total := deref(ev.Current), deref(ev.Total)
	if phase != p.phase {
		p.finish()
		p.phase = phase
		switch phase {
		case "pull":
			p.bar = progressbar.NewOptions64(max(total, 1), progressbar.OptionSetWriter(p.w), progressbar.OptionSetDescription("pull"),
				progressbar.OptionShowBytes(true), progressbar.OptionClearOnFinish())
		case "unpack":
			p.bar = progressbar.NewOptions64(max(total, 1), progressbar.OptionSetWriter(p.w), progressbar.OptionSetDescription("unpack layers"),
				progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
		default:
			fmt.Fprintf(p.w, "%s\n", map[string]string{"cached": "image already unpacked (cached base)", "build": "making the ext4 base",
				"boot": "booting the image", "snapshot": "snapshotting"}[phase])
			return
		}
	}
	if p.bar != nil {
		_ = p.bar.Set64(cur)
	}
}

func (p *buildBars) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
		p.bar = nil
	}
}
