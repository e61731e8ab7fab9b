package main

import (
	"testing"

	"github.com/agentbox/agentbox/internal/deptest"
)

// TestDeps keeps guestinit, the guest's PID 1 and agent, to what it links
// today: every package outside the standard library is listed, so a new one
// fails here until it is added deliberately (it is code in every guest's
// initramfs, run as root). The graph is the one `make initramfs` builds
// (CGO_ENABLED=0).
func TestDeps(t *testing.T) {
	deptest.Checker{
		Pkg: ".",
		Env: []string{"CGO_ENABLED=0", "GOOS=linux"},
		BadDeps: map[string]string{
			"testing": "test code does not belong in PID 1",
		},
		Allow: []string{
			// The guest's own packages and the protocol it shares with the host.
			"github.com/agentbox/agentbox/cmd/guestinit",
			"github.com/agentbox/agentbox/guestinit/...",
			"github.com/agentbox/agentbox/agent/channel",
			"github.com/agentbox/agentbox/proto/agent/v1",
			// ttrpc, its logger (containerd/log over logrus) and the
			// protobuf and gRPC status packages it answers with.
			"github.com/containerd/ttrpc",
			"github.com/containerd/log",
			"github.com/sirupsen/logrus/...",
			"google.golang.org/protobuf/...",
			"google.golang.org/grpc/...",
			"google.golang.org/genproto/googleapis/rpc/status",
			// The agent channel: vsock (Cloud Hypervisor) and yamux over
			// virtio-serial (QEMU).
			"github.com/mdlayher/vsock",
			"github.com/mdlayher/socket",
			"github.com/hashicorp/yamux",
			"golang.org/x/net/bpf",
			"golang.org/x/sync/errgroup",
			// Exec (terminals, users), mounts (FUSE), the network.
			"github.com/creack/pty",
			"github.com/moby/sys/user",
			"github.com/hanwen/go-fuse/v2/...",
			"github.com/vishvananda/netlink/...",
			"github.com/vishvananda/netns",
			"golang.org/x/sys/unix",
			// Boot: kernel modules (compressed .ko.gz, .ko.xz, .ko.zst) and mounts.
			"github.com/u-root/u-root/pkg/kmodule",
			"github.com/u-root/u-root/pkg/mount",
			"github.com/klauspost/compress/...",
			"github.com/klauspost/pgzip",
			"github.com/ulikunitz/xz/...",
		},
	}.Check(t)
}
