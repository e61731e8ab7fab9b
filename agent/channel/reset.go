package channel

// ResetMarker starts every new host connection to a multiplexed (QEMU
// virtio-serial) agent channel, before the yamux session. Its first byte is
// never the first byte of a yamux frame (version 0), so the guest can find
// it at a frame boundary of a session that is still running: a guest restored
// from a snapshot, or one whose previous host went away without the guest
// seeing a disconnect, keeps stale yamux state that the marker ends.
var ResetMarker = []byte("\xffAGENTBOX-CHANNEL-RESET\n")
