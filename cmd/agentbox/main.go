// Command agentbox is the agentbox CLI: `agentbox serve` runs hostd, and the
// other commands drive sandboxes through hostd's API.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/agentbox/agentbox/cmd/agentbox/internal/commands"
	"github.com/agentbox/agentbox/cmd/agentbox/internal/gateway"
	agentmcp "github.com/agentbox/agentbox/cmd/agentbox/internal/mcp"
	"github.com/agentbox/agentbox/cmd/agentbox/internal/serve"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := commands.Run(ctx, os.Args, commands.IO{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}, serve.Command(), agentmcp.Command(), gateway.Command())
	stop()
	os.Exit(code)
}
