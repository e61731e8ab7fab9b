// Package agent implements the guest side of the host ↔ guest protocol: the
// Exec, Files, System and Diff ttrpc services that guestinit serves on the agent
// channel. It runs on any Linux host too, which is how its tests run.
package agent

import (
	"github.com/containerd/ttrpc"

	agentv1 "github.com/agentbox/agentbox/proto/agent/v1"
)

// Register adds the agent's services to srv (Diff keeps no state: it
// needs no argument).
func Register(srv *ttrpc.Server, e *Exec, f *Files, s *System) {
	agentv1.RegisterExecService(srv, e)
	agentv1.RegisterFilesService(srv, f)
	agentv1.RegisterSystemService(srv, s)
	agentv1.RegisterDiffService(srv, NewDiff())
}
