// Package watch is the guest's flight recorder (DESIGN R13): it watches the
// guest's writable filesystems with fanotify, attributes each change to the
// exec session whose process caused it, derives package installs (pip, npm,
// dpkg) from the file changes, and keeps the newest events in a ring that the
// host pulls through the Events ttrpc service.
//
// The pieces, in the order an event flows through them:
//
//   - fanotify.go reads and parses raw fanotify events in FID mode.
//   - resolve.go turns directory file handles back into paths.
//   - watcher.go drains the fanotify fd (in Run's goroutine as events come,
//     in Flush's caller at an exec's end), maps raw events to
//     created/modified/deleted/renamed.
//   - packages.go, dpkg.go detect package changes from file events.
//   - ring.go holds the events; service.go serves them.
package watch
