#!/usr/bin/env bash
# Build one of the ready templates of images/templates/NAME as an OCI layout:
#
#   $CACHE/templates/NAME-<KEY>/     OCI layout directory (one zstd layer)
#   $CACHE/templates/NAME -> NAME-<KEY>
#
# The root tree is the base image's (the tarball images/build-rootfs.sh
# keeps of it) plus the recipe's packages, installed with apt in a
# chroot from the base's Debian mirror; downloaded .debs are kept in
# $CACHE/templates/apt-cache. KEY is the sha256 of the base recipe and
# script, this script, the template's files and the layout writer, so an
# edit of any of them builds a new layout; an existing one is never rebuilt.
# hostd makes a template of the layout (`agentbox template build NAME
# --image $CACHE/templates/NAME`, with that directory an --image-import-dir).
# See images/README.md.
#
#   images/build-template.sh NAME
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SELF=$HERE/$(basename "${BASH_SOURCE[0]}")
ROOT=$(dirname "$HERE")
CACHE=$(realpath -m "${AGENTBOX_CACHE:-/var/cache/agentbox}")
TDIR=$CACHE/templates

log() { printf 'images/build-template: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1fs", b-a}'; }

NAME=${1:-}
[[ $NAME =~ ^[a-z0-9][a-z0-9-]*$ ]] || die "usage: $0 NAME (one of: $(cd "$HERE/templates" && ls -d */ | tr -d / | tr '\n' ' '))"
SRC=$HERE/templates/$NAME
RECIPE=$SRC/recipe
[[ -f $RECIPE ]] || die "no template $NAME: $RECIPE not found"

BASE_RECIPE=${AGENTBOX_ROOTFS_RECIPE:-$HERE/rootfs.recipe}
KEY=$(cat "$BASE_RECIPE" "$HERE/build-rootfs.sh" "$SELF" \
	"$ROOT/images/layout/main.go" "$ROOT/images/oci/layout.go" \
	$(find "$SRC" -type f | LC_ALL=C sort) | sha256sum | cut -d' ' -f1)
OUT=$TDIR/$NAME-$KEY

point_link() {
	if [[ $(readlink "$TDIR/$NAME" 2>/dev/null || true) != "$NAME-$KEY" ]]; then
		ln -sfn "$NAME-$KEY" "$TDIR/.$NAME.new"
		mv -Tf "$TDIR/.$NAME.new" "$TDIR/$NAME"
	fi
}

if [[ -f $OUT/index.json ]]; then
	point_link
	log "cached: $OUT"
	exit 0
fi

[[ $(id -u) -eq 0 ]] || die "must run as root (chroot, file ownership in the image)"
for tool in chroot tar zstd go sha256sum flock findmnt; do
	command -v "$tool" >/dev/null 2>&1 || die "missing tool: $tool (run ci/install-deps.sh)"
done

# ---------------------------------------------------------------- recipe
# packages P...      Debian packages added to the base's (repeatable)
# env K=V            the image's environment (repeatable; PATH and LANG are set)
# workdir DIR        the image's working directory (default /root)
# user U             the image's default user
# cmd JSON           the image's Cmd, a JSON array
# entrypoint JSON    the image's Entrypoint, a JSON array
# An executable file `setup` next to the recipe runs in the chroot after
# the packages are installed (with /proc mounted, services not started).
packages=()
cfg=(-env "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" -env "LANG=C.UTF-8")
workdir=/root
while read -r key rest; do
	case $key in
	"") ;;
	packages) read -ra p <<<"$rest" && packages+=("${p[@]}") ;;
	env) cfg+=(-env "$rest") ;;
	workdir) workdir=$rest ;;
	user) cfg+=(-user "$rest") ;;
	cmd) cfg+=(-cmd "$rest") ;;
	entrypoint) cfg+=(-entrypoint "$rest") ;;
	*) die "$RECIPE: unknown directive '$key'" ;;
	esac
done < <(sed 's/#.*//' "$RECIPE")
cfg+=(-workdir "$workdir")
((${#packages[@]} > 0)) || die "$RECIPE: no packages"

# ---------------------------------------------------------------- build
mkdir -p "$TDIR/tmp" "$TDIR/apt-cache/partial"
exec 9>"$TDIR/.lock" # one build at a time: they share the apt cache
flock 9
if [[ -f $OUT/index.json ]]; then # built by a concurrent run while we waited
	point_link
	log "cached: $OUT"
	exit 0
fi

# unmount_below DIR: unmount whatever is mounted below DIR, deepest first.
unmount_below() {
	local m
	for m in $(findmnt -rn -o TARGET | grep -F "$1/" | sort -r); do
		umount -l "$m" 2>/dev/null || true
	done
}
for d in "$TDIR"/tmp/*; do # leftovers of a build that was killed outright (we hold the lock)
	[[ -d $d ]] || continue
	log "removing stale $d"
	unmount_below "$d"
	rm -rf --one-file-system "$d"
done

T0=$(now)
work=$(mktemp -d "$TDIR/tmp/$NAME.XXXXXX")
tree=$work/tree
cleanup() {
	unmount_below "$work"
	rm -rf --one-file-system "$work"
}
trap cleanup EXIT
trap "exit 130" INT
trap "exit 143" TERM

log "key $KEY"
# The base tree: the tarball build-rootfs.sh keeps next to the base image.
TAR=(tar --numeric-owner --xattrs --xattrs-include='*' --acls)
BASE_KEY=$(cat "$BASE_RECIPE" "$HERE/build-rootfs.sh" | sha256sum | cut -d' ' -f1)
t=$(now)
bash "$HERE/build-rootfs.sh"
mkdir "$tree"
zstd -q -dc "$CACHE/images/base-$BASE_KEY.tree.tar.zst" | "${TAR[@]}" -C "$tree" -xpf -
log "phase base tree: $(since "$t")"

t=$(now)
# apt in the chroot: the host's resolver, the shared .deb cache, no
# services started by maintainer scripts.
cp -L /etc/resolv.conf "$tree/etc/resolv.conf"
printf '#!/bin/sh\nexit 101\n' >"$tree/usr/sbin/policy-rc.d"
chmod 0755 "$tree/usr/sbin/policy-rc.d"
mount -t proc proc "$tree/proc"
mount --bind "$TDIR/apt-cache" "$tree/var/cache/apt/archives"
in_tree() { chroot "$tree" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"; }
log "apt-get install ${packages[*]}"
in_tree apt-get -q update >&2
in_tree apt-get -q -y --no-install-recommends -o Dpkg::Use-Pty=0 install "${packages[@]}" >&2
log "phase packages: $(since "$t")"
if [[ -f $SRC/setup ]]; then
	t=$(now)
	install -m 0755 "$SRC/setup" "$tree/tmp/agentbox-setup"
	in_tree /tmp/agentbox-setup >&2
	rm -f "$tree/tmp/agentbox-setup"
	log "phase setup: $(since "$t")"
fi
unmount_below "$tree"
# Back to the base's state: nothing of the build host, no apt caches.
printf '# written by guestinit at boot\n' >"$tree/etc/resolv.conf"
rm -f "$tree/usr/sbin/policy-rc.d"
rm -rf "$tree"/var/cache/apt/*.bin "$tree"/var/lib/apt/lists/* "$tree"/var/log/apt/* "$tree/var/log/dpkg.log"

t=$(now)
# --numeric-owner: the image's uids, not the host's names for them.
"${TAR[@]}" -C "$tree" -cf - . |
	zstd -q -T0 -3 -o "$work/layer.tar.zst"
log "phase tar: $(since "$t") ($(du -h "$work/layer.tar.zst" | cut -f1) compressed)"

t=$(now)
(cd "$ROOT" && CGO_ENABLED=0 go build -o "$work/layout" ./images/layout)
id=$("$work/layout" -layer "$work/layer.tar.zst" -out "$work/oci" "${cfg[@]}")
mv -T "$work/oci" "$OUT"
point_link
log "phase layout: $(since "$t") (image $id)"
log "built $OUT in $(since "$T0")"
