package channel

// The guest ports and markers that guestinit and the host agree on. They
// live here, with the handshake, so that the guest imports nothing of the
// host's VMM code to learn them.
const (
	// AgentPort is the channel port on which guestinit serves its ttrpc
	// services.
	AgentPort uint32 = 1024
	// PortForwardPort is the channel port on which guestinit forwards
	// streams to guest TCP ports; each stream starts with OpenTCP's header.
	PortForwardPort uint32 = 1025
	// MountPort is the channel port of the mount streams: the host opens
	// one and serves the Mounts ttrpc service on it, and guestinit's FUSE
	// filesystems are its client (guestinit/mount, hostd/mounts).
	MountPort uint32 = 1026
	// FilesPort is the channel port of the file streams: each stream
	// carries one whole file read or write (filestream.go). A guest whose
	// agent predates it refuses the port, and the host falls back to the
	// Files service's chunk calls.
	FilesPort uint32 = 1027
	// ProbeMarker is what guestinit prints on its console in probe mode
	// (kernel cmdline agentbox.probe=1) just before it powers the VM off.
	// Backends boot the guest in probe mode to learn whether an accelerator
	// really works.
	ProbeMarker = "AGENTBOX-PROBE-OK"
)
