// Package guestinit is the guest's PID 1. It mounts the pseudo-filesystems,
// loads the kernel modules it needs, mounts the sandbox's root disk and
// switches into it while staying PID 1, sets the hostname, brings up
// loopback, reaps orphans, and serves the agent (package agent) on the agent
// channel: virtio-serial with a yamux multiplexer under QEMU, vsock under
// Cloud Hypervisor.
package guestinit
