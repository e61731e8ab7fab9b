package guestinit

import (
	"log/slog"

	"github.com/agentbox/agentbox/guestinit/agent"
	"github.com/agentbox/agentbox/guestinit/oomguard"
)

// startOOMGuard puts the user commands' cgroup under its memory limit and
// reports the kernel's OOM kills into ring (package oomguard). A guest
// without a memory controller keeps the kernel's own OOM policy.
func startOOMGuard(log *slog.Logger, ring oomguard.Sink, sessions oomguard.Sessions) {
	limit, err := oomguard.Setup("/sys/fs/cgroup", agent.ExecCgroup, "/proc/meminfo")
	if err != nil {
		log.Warn("early OOM: no memory limit for commands", "err", err)
	} else {
		log.Info("early OOM: commands' memory limit", "bytes", limit, "high", oomguard.HighFor(limit))
		g := &oomguard.Guard{Dir: agent.ExecCgroup, Sink: ring, Sessions: sessions, Kmsg: "/dev/kmsg", Proc: "/proc"}
		go func() {
			if err := g.Run(); err != nil {
				log.Warn("early OOM: no pressure guard, the kernel's OOM killer acts alone", "err", err)
			}
		}()
	}
	kmsg, err := oomguard.OpenKmsg("/dev/kmsg")
	if err != nil {
		log.Warn("early OOM: no kernel log, OOM kills go unrecorded", "err", err)
		return
	}
	go func() {
		defer kmsg.Close()
		if err := oomguard.Watch(kmsg, ring, sessions); err != nil {
			log.Error("early OOM: kernel log watch stopped", "err", err)
		}
	}()
}
