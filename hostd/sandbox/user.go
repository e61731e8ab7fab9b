package sandbox

import (
	"fmt"
	"strings"
)

// maxUserLen bounds a user spec.
const maxUserLen = 256

// CheckUser checks a user spec of an exec or a snapshot: "" (the default),
// "root", a name or a uid, optionally ":" and a group name or gid, as an
// image's USER names it. The guest resolves it.
func CheckUser(u string) error {
	if u == "" {
		return nil
	}
	name, group, hasGroup := strings.Cut(u, ":")
	switch {
	case len(u) > maxUserLen:
		return fmt.Errorf("%w: user is longer than %d bytes", ErrInvalid, maxUserLen)
	case name == "" || (hasGroup && (group == "" || strings.Contains(group, ":"))):
		return fmt.Errorf("%w: user %q is not name, uid, name:group or uid:gid", ErrInvalid, u)
	case strings.ContainsFunc(u, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return fmt.Errorf("%w: user %q contains spaces or control characters", ErrInvalid, u)
	}
	return nil
}
