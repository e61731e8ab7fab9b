package sandbox

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/agentbox/agentbox/agent/channel"
)

// openTimeout bounds the port-forward header exchange.
const openTimeout = 15 * time.Second

// DialPort opens a connection to TCP port on sandbox id's loopback, carried
// by a port-forward stream over the agent channel (never by the guest's
// network interface). Nothing listening there is an error wrapping
// channel.ErrPortClosed.
func (m *Manager) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	b, err := m.live(ctx, id)
	if err != nil {
		return nil, err
	}
	st, err := b.vm.Dial(ctx, channel.PortForwardPort)
	if err != nil {
		return nil, b.streamErr(fmt.Errorf("sandbox: dial port forward: %w", err))
	}
	// The guest answers the header within its own dial timeout (5 s).
	_ = st.SetDeadline(time.Now().Add(openTimeout))
	conn, err := channel.OpenTCP(st, port)
	_ = st.SetDeadline(time.Time{})
	if err != nil {
		st.Close()
		return nil, b.streamErr(err)
	}
	return conn, nil
}
