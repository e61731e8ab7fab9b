package vmmtest

import (
	"context"
	"log/slog"
	"net"
)

// Guest is the fake guest of a FakeVM on its own, for the fake VMM process
// of a backend's tests (the fake cloud-hypervisor serves one behind its
// vsock socket): the real guestinit agent's Exec and Files services, a
// host-safe System service and the port forwarder, in the process that
// calls NewGuest. Its sessions live as long as that process, so a fake VMM
// that a hostd releases and another adopts keeps them. While paused, its
// streams neither read nor write, like a guest whose vCPUs are stopped.
type Guest struct {
	g *fakeGuest
}

// ErrGuestClosed is what Dial returns after Close.
var ErrGuestClosed = errGuestClosed

// NewGuest starts a guest whose Health reports the hostname of cmdline
// (agentbox.hostname=), else id.
func NewGuest(id, cmdline string, log *slog.Logger) (*Guest, error) {
	g, err := newFakeGuest(hostnameOf(cmdline, id), log)
	if err != nil {
		return nil, err
	}
	return &Guest{g: g}, nil
}

// Dial opens a stream to port: the agent (channel.AgentPort), the port
// forwarder, or channel.ErrRefused for a port the guest does not serve.
func (g *Guest) Dial(ctx context.Context, port uint32) (net.Conn, error) {
	return g.g.dial(ctx, port, nil)
}

// Pause freezes the guest's streams; Resume thaws them.
func (g *Guest) Pause()  { g.g.gate.pause() }
func (g *Guest) Resume() { g.g.gate.resume() }

// Close ends the guest: its streams close and the processes its agent
// started are killed. It waits for them until ctx ends.
func (g *Guest) Close(ctx context.Context) error { return g.g.close(ctx) }
