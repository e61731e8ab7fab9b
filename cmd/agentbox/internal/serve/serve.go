// Package serve is `agentbox serve`: it runs hostd in the foreground until
// SIGINT or SIGTERM. Then it stops accepting requests, lets those in
// flight finish within --shutdown-timeout and cuts the rest, and leaves the
// running sandboxes running for the next hostd (--drain-on-exit deletes
// them instead).
package serve

import (
	"github.com/urfave/cli/v3"

	"github.com/agentbox/agentbox/cmd/internal/hostdflags"
)

// Command returns the serve command, with the flags of cmd/hostd
// (hostdflags). Its API key is the global --api-key (AGENTBOX_API_KEY),
// accepted in addition to the stored keys.
func Command() *cli.Command {
	return &cli.Command{
		Name:   "serve",
		Usage:  "run hostd, the agentbox daemon, in the foreground",
		Flags:  hostdflags.Flags(),
		Action: hostdflags.Action,
	}
}
