package gateway

import "github.com/agentbox/agentbox/fleet/hosttoken"

func hashToken(t string) string { return hosttoken.Hash(t) }
