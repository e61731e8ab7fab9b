package commands

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/agentbox/agentbox/client"
)

func cpCommand() *cli.Command {
	return &cli.Command{
		Name:  "cp",
		Usage: "copy a file between the host and a sandbox, streamed",
		UsageText: "agentbox cp [-r] LOCAL ID:/PATH   (upload; LOCAL - reads stdin)\n" +
			"agentbox cp [-r] ID:/PATH LOCAL   (download; LOCAL - writes stdout)\n" +
			"With -r a directory is copied (as a tar stream): into the destination if it is a directory, else as it.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "recursive", Aliases: []string{"r"}, Usage: "copy a directory and everything in it"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			args := cmd.Args().Slice()
			if len(args) != 2 {
				return errors.New("cp: give a source and a destination, one of them ID:/path")
			}
			src, dst := parseCPArg(args[0]), parseCPArg(args[1])
			if (src.id == "") == (dst.id == "") {
				return errors.New("cp: exactly one of source and destination must be ID:/path")
			}
			c, err := newClient(cmd)
			if err != nil {
				return err
			}
			if cmd.Bool("recursive") {
				if dst.id != "" {
					return uploadDir(ctx, c, src.path, dst)
				}
				return downloadDir(ctx, c, src, dst.path)
			}
			if dst.id != "" {
				return upload(ctx, cmd, c, src.path, dst)
			}
			return download(ctx, cmd, c, src, dst.path)
		},
	}
}

// cpArg is one side of cp: a sandbox path (id set) or a local path.
type cpArg struct {
	id, path string
}

// parseCPArg reads "ID:/abs/path" as a sandbox path; anything else (such as
// ./a:b or /tmp/x) is local.
func parseCPArg(s string) cpArg {
	id, p, ok := strings.Cut(s, ":")
	if ok && id != "" && !strings.ContainsAny(id, `/\.`) && strings.HasPrefix(p, "/") {
		return cpArg{id: id, path: p}
	}
	return cpArg{path: s}
}

func upload(ctx context.Context, cmd *cli.Command, c *client.Client, local string, dst cpArg) error {
	var (
		r    io.Reader
		mode fs.FileMode
		name = filepath.Base(local)
	)
	if local == "-" {
		r, name = stdin(cmd), ""
	} else {
		f, err := os.Open(local)
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if fi.IsDir() {
			return fmt.Errorf("cp: %s is a directory; use -r to copy it", local)
		}
		r, mode = f, fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)
	}
	target, err := remoteTarget(ctx, c, dst, name)
	if err != nil {
		return err
	}
	return c.WriteFile(ctx, dst.id, target, mode, r)
}

// remoteTarget is dst's path, or name inside it when dst is a directory.
func remoteTarget(ctx context.Context, c *client.Client, dst cpArg, name string) (string, error) {
	if name == "" {
		return dst.path, nil
	}
	if strings.HasSuffix(dst.path, "/") {
		return path.Join(dst.path, name), nil
	}
	fi, err := c.Stat(ctx, dst.id, dst.path)
	var apiErr *client.APIError
	switch {
	case errors.As(err, &apiErr) && apiErr.Code == "file_not_found":
		return dst.path, nil
	case err != nil:
		return "", err
	case fi.IsDir:
		return path.Join(dst.path, name), nil
	}
	return dst.path, nil
}

func download(ctx context.Context, cmd *cli.Command, c *client.Client, src cpArg, local string) error {
	if local == "-" {
		return c.ReadFile(ctx, src.id, src.path, stdout(cmd))
	}
	fi, err := c.Stat(ctx, src.id, src.path)
	if err != nil {
		return err
	}
	if fi.IsDir {
		return fmt.Errorf("cp: %s:%s is a directory; use -r to copy it", src.id, src.path)
	}
	if st, err := os.Stat(local); err == nil && st.IsDir() {
		local = filepath.Join(local, path.Base(src.path))
	}
	// Download next to the target and rename, so a failed transfer leaves
	// no partial file behind.
	f, err := os.CreateTemp(filepath.Dir(local), "."+filepath.Base(local)+".part-*")
	if err != nil {
		return err
	}
	err = c.ReadFile(ctx, src.id, src.path, f)
	err = errors.Join(err, f.Chmod(fs.FileMode(fi.Mode)&fs.ModePerm), f.Close())
	if err == nil {
		err = os.Rename(f.Name(), local)
	}
	if err != nil {
		return errors.Join(err, os.Remove(f.Name()))
	}
	return nil
}
