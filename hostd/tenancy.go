package hostd

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/agentbox/agentbox/hostd/auth"
	"github.com/agentbox/agentbox/hostd/portproxy"
	"github.com/agentbox/agentbox/hostd/store"
)

// tenantAuth is the API's authenticator that, for service URLs, also
// requires the key's project to own the sandbox: an API key opens the
// service URLs of its own project's sandboxes (an admin's, of any).
type tenantAuth struct {
	principalAuth
	st *store.Store
}

var _ portproxy.SandboxAuthenticator = tenantAuth{}

// AuthenticateFor returns nil if r's key may reach sandbox id.
func (a tenantAuth) AuthenticateFor(r *http.Request, id string) error {
	k, err := a.Principal(r)
	if err != nil || k.Role == store.RoleAdmin {
		return err
	}
	o, err := a.st.GetOwner(r.Context(), store.KindSandbox, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return err
	case o.Project == k.Project:
		return nil
	}
	return fmt.Errorf("%w: the key's project does not own sandbox %s", auth.ErrUnauthorized, id)
}
