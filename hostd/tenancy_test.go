package hostd

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/hostd/auth"
	"github.com/agentbox/agentbox/hostd/store"
)

// TestTenantAuthServiceURLs: the service URLs of a sandbox open to its
// project's keys and admins, not to another project's key.
func TestTenantAuthServiceURLs(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "agentbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	keys := map[string]string{}
	for _, k := range []struct{ project, role string }{{"alpha", store.RoleMember}, {"beta", store.RoleMember}, {store.DefaultProject, store.RoleAdmin}} {
		if k.project != store.DefaultProject {
			if _, err := st.CreateProject(ctx, k.project); err != nil {
				t.Fatal(err)
			}
		}
		key, rec, err := auth.NewRecord("", k.project, k.role, time.Time{})
		if err == nil {
			err = st.CreateAPIKey(ctx, rec, auth.Hash(key))
		}
		if err != nil {
			t.Fatal(err)
		}
		keys[k.project] = key
	}
	if err := st.SetOwner(ctx, store.KindSandbox, "sb-a", store.Owner{Project: "alpha"}); err != nil {
		t.Fatal(err)
	}
	a := tenantAuth{auth.New(st), st}
	for _, tc := range []struct {
		project string
		ok      bool
	}{{"alpha", true}, {"beta", false}, {store.DefaultProject, true}} {
		r := httptest.NewRequest("GET", "http://80-sb-a.example/", nil)
		r.Header.Set("Authorization", "Bearer "+keys[tc.project])
		if err := a.AuthenticateFor(r, "sb-a"); (err == nil) != tc.ok {
			t.Errorf("%s's key: got %v, want ok %v", tc.project, err, tc.ok)
		}
	}
}
