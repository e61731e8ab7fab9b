package commands

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/archive"
)

// uploadDir streams local directory dir to the sandbox as tar: into dst if
// dst is a directory there, else as dst.
func uploadDir(ctx context.Context, c *client.Client, dir string, dst cpArg) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	target, err := remoteTarget(ctx, c, dst, filepath.Base(filepath.Clean(dir)))
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := archive.Write(ctx, pw, archive.DirSource{Root: root})
		pw.CloseWithError(err)
		done <- err
	}()
	_, err = c.PutArchive(ctx, dst.id, target, pr)
	pr.CloseWithError(errors.New("cp: upload ended")) // ends the writer if hostd stopped reading
	werr := <-done
	if err == nil && werr != nil {
		err = fmt.Errorf("cp: %s: %w", dir, werr)
	}
	return err
}

// downloadDir streams the sandbox directory src to local: into local if it
// is a directory, else as local (created). The tar comes from the sandbox,
// so it is unpacked through an os.Root: no entry lands outside the target.
func downloadDir(ctx context.Context, c *client.Client, src cpArg, local string) error {
	fi, err := c.Stat(ctx, src.id, src.path)
	if err != nil {
		return err
	}
	if !fi.IsDir {
		return fmt.Errorf("cp: %s:%s is not a directory", src.id, src.path)
	}
	if st, err := os.Stat(local); err == nil && st.IsDir() {
		local = filepath.Join(local, path.Base(src.path))
	}
	if err := os.MkdirAll(local, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(local)
	if err != nil {
		return err
	}
	defer root.Close()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := c.GetArchive(ctx, src.id, src.path, pw)
		pw.CloseWithError(err)
		done <- err
	}()
	_, err = archive.Extract(ctx, pr, archive.DirSink{Root: root})
	pr.CloseWithError(errors.New("cp: download ended"))
	if gerr := <-done; err == nil {
		err = gerr
	} else if gerr != nil && !errors.Is(gerr, io.ErrClosedPipe) && !errors.Is(err, gerr) {
		err = errors.Join(err, gerr)
	}
	return err
}
