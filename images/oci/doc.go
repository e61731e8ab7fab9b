// Package oci turns an OCI or Docker image into a guest root filesystem:
// it opens the image (from a registry, an OCI layout directory or a
// `docker save` tarball, with go-containerregistry), flattens its layers
// into a directory it owns (whiteouts, opaque directories, hard links,
// device nodes, modes, owners, xattrs; no path ever resolved out of that
// directory), makes an ext4 filesystem of it with `mkfs.ext4 -d` and
// converts that to a read-only qcow2 base, cached by the image's config
// digest so that one image is unpacked once.
//
// The files, one concern each:
//
//   - source.go: references (registry, layout, tarball), the HTTP policy
//     (plain HTTP only to loopback or a named insecure registry) and the
//     credentials (hostd's secrets or a Docker config file).
//   - flatten.go: applying layers to a directory, safely.
//   - base.go: the ext4 and qcow2 base and its cache.
//   - config.go: the parts of the image config a template keeps.
package oci
