// Package agent is the room of the host ↔ guest protocol (DESIGN §4). Its
// parts are imported by both sides, and it imports neither:
//
//   - proto/agent/v1: the .proto and the generated ttrpc code (kept under
//     proto/ with the project's other generated protocol code);
//   - agent/channel: the stream handshake every transport speaks
//     (CONNECT <port>), the port-forward header, the reset marker, and the
//     ports and markers guestinit and the host agree on;
//   - agent/agentclient: the host side, a typed client of guestinit's
//     services.
//
// The guest side is guestinit/agent. internal/layers checks that the guest
// imports nothing of the host and that this room depends on neither side.
package agent
