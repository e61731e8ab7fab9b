#!/usr/bin/env bash
# Build the read-only base root filesystem image of every sandbox:
#
#   $CACHE/images/base-<KEY>.qcow2   ext4 inside qcow2, mode 0444
#   $CACHE/images/base.qcow2 -> base-<KEY>.qcow2
#   $CACHE/images/base-<KEY>.tree.tar.zst   its root tree (images/build-template.sh)
#
# KEY is the sha256 of images/rootfs.recipe followed by this script, so editing
# either produces a new image; an existing one is never rebuilt. CACHE defaults
# to /var/cache/agentbox (override with AGENTBOX_CACHE). The Debian mirror is the
# one configured in the host's apt sources (override with AGENTBOX_DEBIAN_MIRROR).
# See images/README.md.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SELF=$HERE/$(basename "${BASH_SOURCE[0]}")
RECIPE=${AGENTBOX_ROOTFS_RECIPE:-$HERE/rootfs.recipe}
CACHE=$(realpath -m "${AGENTBOX_CACHE:-/var/cache/agentbox}")
IDIR=$CACHE/images

log() { printf 'images/build-rootfs: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1fs", b-a}'; }

[[ -f $RECIPE ]] || die "recipe not found: $RECIPE"
KEY=$(cat "$RECIPE" "$SELF" | sha256sum | cut -d' ' -f1)
OUT=$IDIR/base-$KEY.qcow2
TREE_TAR=$IDIR/base-$KEY.tree.tar.zst

point_link() {
	if [[ $(readlink "$IDIR/base.qcow2" 2>/dev/null || true) != "base-$KEY.qcow2" ]]; then
		ln -sfn "base-$KEY.qcow2" "$IDIR/.base.qcow2.new"
		mv -Tf "$IDIR/.base.qcow2.new" "$IDIR/base.qcow2"
	fi
}

if [[ -f $OUT && -f $TREE_TAR ]]; then
	point_link
	log "cached: $OUT"
	exit 0
fi

[[ $(id -u) -eq 0 ]] || die "must run as root (debootstrap, file ownership in the image)"
for tool in debootstrap zstd tar mkfs.ext4 qemu-img sha256sum flock du findmnt; do
	command -v "$tool" >/dev/null 2>&1 || die "missing tool: $tool (run ci/install-deps.sh)"
done

# ---------------------------------------------------------------- recipe
suite="" variant="" components="main"
packages=()
while read -r key rest; do
	case $key in
	"" | "#"*) ;;
	suite) suite=$rest ;;
	variant) variant=$rest ;;
	components) components=$rest ;;
	packages) read -ra p <<<"$rest" && packages+=("${p[@]}") ;;
	*) die "$RECIPE: unknown directive '$key'" ;;
	esac
done < <(sed 's/#.*//' "$RECIPE")
[[ -n $suite ]] || die "$RECIPE: no suite"
[[ -n $variant ]] || die "$RECIPE: no variant"
include=$(IFS=,; echo "${packages[*]}")

# ---------------------------------------------------------------- mirror
# The first enabled "deb" source for $suite in the host's apt configuration:
# deb822 files (sources.list.d/*.sources, "URIs:" / "Suites:" stanzas) first,
# then one-line "deb [opts] URI suite comp..." entries.
mirror_from_apt() {
	local f
	shopt -s nullglob
	for f in /etc/apt/sources.list.d/*.sources; do
		awk -v want="$suite" '
			function flush() {
				if (types ~ /(^|[ \t])deb([ \t]|$)/ && tolower(enabled) != "no" && uris != "") {
					n = split(suites, s, /[ \t]+/)
					for (i = 1; i <= n; i++) if (s[i] == want) { split(uris, u, /[ \t]+/); print u[1]; found = 1; exit }
				}
				types = ""; suites = ""; uris = ""; enabled = ""
			}
			/^[ \t]*#/ { next }
			/^[ \t]*$/ { flush(); next }
			{ k = tolower($1); sub(/:$/, "", k); v = $0; sub(/^[^:]*:[ \t]*/, "", v)
			  if (k == "types") types = v; else if (k == "suites") suites = v
			  else if (k == "uris") uris = v; else if (k == "enabled") enabled = v }
			END { if (!found) flush() }' "$f"
	done
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[[ -f $f ]] || continue
		awk -v want="$suite" '
			$1 == "deb" {
				i = 2
				if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
				if ($(i + 1) == want) print $i
			}' "$f"
	done
}
MIRROR=${AGENTBOX_DEBIAN_MIRROR:-$(mirror_from_apt | head -n1 || true)}
MIRROR=${MIRROR%/}
[[ -n $MIRROR ]] || die "no 'deb' source for suite $suite in /etc/apt/sources.list{,.d/*}; set AGENTBOX_DEBIAN_MIRROR"

# ---------------------------------------------------------------- build
mkdir -p "$IDIR/tmp" "$IDIR/debootstrap-cache"
exec 9>"$IDIR/.lock"
flock 9
if [[ -f $OUT && -f $TREE_TAR ]]; then # built by a concurrent run while we waited
	point_link
	log "cached: $OUT"
	exit 0
fi

# remove_tree DIR: unmount whatever is mounted below DIR (debootstrap mounts
# proc, sys, ... in the tree and leaves them mounted when it is killed), deepest
# first, then delete DIR without crossing into another filesystem.
remove_tree() {
	local m
	for m in $(findmnt -rn -o TARGET | grep -F "$1/" | sort -r); do
		umount -l "$m" 2>/dev/null || true
	done
	rm -rf --one-file-system "$1"
}
# We hold the lock, so leftovers of a build that was killed outright are stale.
for d in "$IDIR"/tmp/build.*; do
	[[ -d $d ]] || continue
	log "removing stale $d"
	remove_tree "$d"
done

T0=$(now)
work=$(mktemp -d "$IDIR/tmp/build.XXXXXX")
tree=$work/tree
raw=$work/rootfs.raw
cleanup() {
	local t
	t=$(now)
	remove_tree "$work"
	rm -f "$IDIR/.base-$KEY.qcow2.tmp" "$IDIR/.base-$KEY.tree.tar.zst.tmp"
	log "cleanup: $(since "$t")"
}
trap cleanup EXIT
trap "exit 130" INT
trap "exit 143" TERM

log "key $KEY"
log "debootstrap $suite ($variant) from $MIRROR: ${packages[*]}"
t=$(now)
debootstrap --variant="$variant" --components="$components" --include="$include" \
	--cache-dir="$IDIR/debootstrap-cache" \
	"$suite" "$tree" "$MIRROR" >&2 ||
	{ [[ -f $tree/debootstrap/debootstrap.log ]] && tail -n 30 "$tree/debootstrap/debootstrap.log" >&2; die "debootstrap failed"; }
log "phase debootstrap: $(since "$t")"

# ---------------------------------------------------------------- fixes
t=$(now)
# guestinit is PID 1 and configures network, DNS and time itself; these are
# placeholders so nothing of the build host leaks into the image (debootstrap
# copies the host's /etc/hosts and /etc/resolv.conf, modes included).
put() { rm -f "$tree/$1" && cat >"$tree/$1" && chmod 0644 "$tree/$1"; } # put PATH <CONTENT
echo agentbox | put etc/hostname
put etc/hosts <<'EOF'
127.0.0.1	localhost
127.0.1.1	agentbox
::1		localhost ip6-localhost ip6-loopback
ff02::1		ip6-allnodes
ff02::2		ip6-allrouters
EOF
printf '# written by guestinit at boot\n' | put etc/resolv.conf
# Empty machine-id: each sandbox gets its own identity at boot.
put etc/machine-id </dev/null
rm -f "$tree/var/lib/dbus/machine-id"
install -d -m 0700 "$tree/root"
install -d -m 1777 "$tree/tmp"
# A sandbox is disposable: let `pip install` work system-wide (PEP 668).
put etc/pip.conf <<'EOF'
[global]
break-system-packages = true
EOF
printf 'LANG=C.UTF-8\n' | put etc/default/locale
rm -rf "$tree"/var/cache/apt/archives/*.deb "$tree"/var/cache/apt/*.bin \
	"$tree"/var/lib/apt/lists/* "$tree/var/log/bootstrap.log"
log "phase fixes: $(since "$t")"

# ---------------------------------------------------------------- tree
# The ready templates (images/build-template.sh) start from this tree.
t=$(now)
tar --numeric-owner --xattrs --xattrs-include='*' --acls -C "$tree" -cf - . |
	zstd -q -T0 -3 -o "$IDIR/.base-$KEY.tree.tar.zst.tmp"
chmod 0444 "$IDIR/.base-$KEY.tree.tar.zst.tmp"
mv -f "$IDIR/.base-$KEY.tree.tar.zst.tmp" "$TREE_TAR"
log "phase tree tarball: $(since "$t") ($(du -h "$TREE_TAR" | cut -f1))"

# ---------------------------------------------------------------- ext4
t=$(now)
used_mib=$(du -s --block-size=1M --one-file-system "$tree" | cut -f1)
size_mib=$((used_mib + 1024))
((size_mib >= 2048)) || size_mib=2048
truncate -s "${size_mib}M" "$raw"
# Inode tables and the journal are zeroed now (cheap: qemu-img skips zeros),
# so the guest kernel does not run ext4lazyinit and write them into every
# sandbox's overlay.
mkfs.ext4 -q -F -L agentbox-root -d "$tree" \
	-E lazy_itable_init=0,lazy_journal_init=0 "$raw" >&2
log "phase mkfs.ext4: $(since "$t") (${used_mib} MiB of files in a ${size_mib} MiB filesystem)"

t=$(now)
qemu-img convert -f raw -O qcow2 "$raw" "$IDIR/.base-$KEY.qcow2.tmp"
chmod 0444 "$IDIR/.base-$KEY.qcow2.tmp"
mv -f "$IDIR/.base-$KEY.qcow2.tmp" "$OUT"
point_link
log "phase qcow2: $(since "$t") ($(du -h "$OUT" | cut -f1) on disk)"
log "built $OUT in $(since "$T0")"
