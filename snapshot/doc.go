// Package snapshot is the snapshot engine (DESIGN §5): it captures a
// running VM (flush the guest's filesystems, pause, freeze the disk layer,
// save device state and memory), prepares restores from a snapshot, keeps
// lineage and reference counts through its Store, garbage-collects fork
// snapshots nothing uses, and keeps snapshots honest on disk: every
// snapshot directory has a manifest with a checksum of each of its files,
// and a snapshot whose files no longer match is refused before anything
// boots from it.
//
// The engine is driven through vmm.VM and vmm.Driver and persists through
// the narrow Store interface declared here; it knows nothing of hostd.
// hostd's sandbox manager decides when to capture, restore and fork.
package snapshot
