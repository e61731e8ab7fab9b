package api

import (
	"context"
	"errors"
	"slices"

	"github.com/agentbox/agentbox/hostd/sandbox"
	"github.com/agentbox/agentbox/hostd/store"
)

// mainCommand is the command a create with start runs: the Entrypoint and
// Cmd of the image that template name was built from.
func (s *server) mainCommand(ctx context.Context, template string) ([]string, error) {
	if template == "" || s.images == nil {
		return nil, badRequest(CodeInvalidRequest, "start needs a template built from an image")
	}
	_, cfg, err := s.images.Image(ctx, template)
	if errors.Is(err, store.ErrNotFound) {
		return nil, badRequest(CodeInvalidRequest, "start: template %s was not built from an image, so it has no Entrypoint or Cmd", template)
	}
	if err != nil {
		return nil, err
	}
	argv := append(slices.Clone(cfg.Entrypoint), cfg.Cmd...)
	if len(argv) == 0 || argv[0] == "" {
		return nil, badRequest(CodeInvalidRequest, "start: template %s's image has no Entrypoint or Cmd", template)
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
