package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"

	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/hostd/store"
	"github.com/agentbox/agentbox/images/imageconfig"
)

// maxGuestConfig bounds the Dockerfile config read back from a guest.
const maxGuestConfig = 64 << 10

// mainCommand is the command a create with start runs: the Entrypoint and
// Cmd of the image that template name was built from. A template that was
// not built from an image may be a Dockerfile's, whose build recorded them
// in the guest (imageconfig.GuestFile): then inGuest is true, and
// guestMainCommand reads them once the sandbox runs.
func (s *server) mainCommand(ctx context.Context, template string) (argv []string, inGuest bool, err error) {
	if template == "" {
		return nil, false, badRequest(CodeInvalidRequest, "start needs a template built from an image or a Dockerfile")
	}
	if s.images == nil {
		return nil, true, nil
	}
	_, cfg, err := s.images.Image(ctx, template)
	if errors.Is(err, store.ErrNotFound) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	argv = append(slices.Clone(cfg.Entrypoint), cfg.Cmd...)
	if len(argv) == 0 || argv[0] == "" {
		return nil, false, badRequest(CodeInvalidRequest, "start: template %s's image has no Entrypoint or Cmd", template)
	}
	return argv, false, nil
}

// guestMainCommand reads the Entrypoint and Cmd that a Dockerfile build
// recorded in sandbox id (the guest's file: bounded, and only data). A
// sandbox without them is deleted: start was the caller's mistake.
func (s *server) guestMainCommand(ctx context.Context, id, template string) ([]string, error) {
	argv, err := s.readGuestMain(ctx, id, template)
	if err != nil {
		if derr := s.m.Delete(context.WithoutCancel(ctx), id); derr != nil {
			s.log.Warn("delete sandbox that has no main service", "sandbox_id", id, "err", derr)
		}
	}
	return argv, err
}

func (s *server) readGuestMain(ctx context.Context, id, template string) ([]string, error) {
	rc, err := s.m.ReadFile(ctx, id, imageconfig.GuestFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, badRequest(CodeInvalidRequest, "start: template %s was built neither from an image nor from a Dockerfile, so it has no Entrypoint or Cmd", template)
	}
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxGuestConfig+1))
	if err != nil {
		return nil, err
	}
	var cfg imageconfig.Config
	if len(b) > maxGuestConfig {
		err = fmt.Errorf("larger than %d bytes", maxGuestConfig)
	} else {
		err = json.Unmarshal(b, &cfg)
	}
	if err != nil {
		return nil, badRequest(CodeInvalidRequest, "start: template %s: the recorded Dockerfile config is unusable: %v", template, err)
	}
	argv := append(slices.Clone(cfg.Entrypoint), cfg.Cmd...)
	if len(argv) == 0 || argv[0] == "" {
		return nil, badRequest(CodeInvalidRequest, "start: template %s's Dockerfile has no ENTRYPOINT or CMD", template)
	}
	return argv, nil
}

// startMain starts argv in sandbox id as a background session with the
// template's env, working directory and user, and no exec timeout (it is
// the sandbox's service, not one command). If it cannot start, the
// sandbox is deleted.
func (s *server) startMain(ctx context.Context, id string, argv []string) (string, error) {
	execID, err := s.m.StartExec(ctx, id, sandbox.ExecRequest{Cmd: argv, TimeoutS: -1})
	if err != nil {
		if derr := s.m.Delete(context.WithoutCancel(ctx), id); derr != nil {
			s.log.Warn("delete sandbox whose main service did not start", "sandbox_id", id, "err", derr)
		}
		return "", err
	}
	return execID, nil
}
