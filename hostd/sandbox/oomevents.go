package sandbox

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/agentbox/agentbox/agent/agentclient"
	"github.com/agentbox/agentbox/hostd/recorder"
)

// maxProcessName bounds the name of an OOM-killed process (the kernel's
// comm is 15 bytes; the guest is untrusted).
const maxProcessName = 64

// oomData is the lifecycle payload of a guest's OOM kill. The guest's
// fields are bounded and its reason kept only when it is one we know.
func oomData(e agentclient.GuestEvent) recorder.LifecycleData {
	o := e.OOM
	name := strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return '?'
	}, o.Name)
	if len(name) > maxProcessName {
		name = strings.ToValidUTF8(name[:maxProcessName], "")
	}
	reason := "unknown"
	switch o.Reason {
	case "cgroup":
		reason = "cgroup"
	case "global":
		reason = "global"
	case "pressure":
		reason = "pressure"
	}
	return recorder.LifecycleData{Action: recorder.ActionOOMKill, Process: name, PID: max(e.PID, 0),
		Reason: fmt.Sprintf("%s: %d MiB resident", reason, max(o.RSSKiB, 0)>>10)}
}
