#!/usr/bin/env bash
# Pack the guest's initramfs: guestinit as /init plus the kernel modules it loads.
#
#   usage: images/mkinitramfs.sh GUESTINIT_BINARY [OUTPUT]
#
# OUTPUT defaults to $AGENTBOX_INITRAMFS, else $CACHE/initramfs.cpio, with
# CACHE=${AGENTBOX_CACHE:-/var/cache/agentbox}. Modules come from
# $CACHE/kernel/modules (run kernel/fetch.sh first). The archive holds:
#
#   /init                       GUESTINIT_BINARY (static), mode 0755
#   /lib/modules/*.ko           the flat plain modules from kernel/fetch.sh
#   /lib/modules/modules.order  their load order, one basename a line
#   /lib/modules/<release>/     the on-demand modules of kernel/ondemand.sh (a
#                               depmod tree; guestinit binds it into the root
#                               for modprobe), when $CACHE/kernel-ondemand has them
#   /dev /proc /sys /newroot /tmp /run   empty mount points
#   /dev/console                char 5:1, so /init has a console from the start
#
# newc cpio, owner 0:0, fixed mtimes, not compressed: under TCG the kernel's
# inflate of a gzipped archive cost every cold boot ~130 ms. QEMU maps the
# file: its pages are page cache, shared by the VMs it boots, and a VM
# restored from a snapshot never reads them. Rebuilt in well under a
# second, byte-identical for identical inputs. Replaced atomically.
set -euo pipefail

log() { printf 'images/mkinitramfs: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[[ $# -ge 1 && $# -le 2 ]] || { echo "usage: $0 GUESTINIT_BINARY [OUTPUT]" >&2; exit 2; }
T0=$(date +%s.%N)
INIT=$1
CACHE=${AGENTBOX_CACHE:-/var/cache/agentbox}
OUT=${2:-${AGENTBOX_INITRAMFS:-$CACHE/initramfs.cpio}}
MODS=$CACHE/kernel/modules
ONDEMAND=
if [[ -f $CACHE/kernel/VERSION ]]; then
	read -r krel kver <"$CACHE/kernel/VERSION"
	ONDEMAND=$CACHE/kernel-ondemand/${krel}_${kver//:/_}/$krel
fi

for tool in cpio; do
	command -v "$tool" >/dev/null 2>&1 || die "missing tool: $tool (run ci/install-deps.sh)"
done
[[ -f $INIT && -r $INIT ]] || die "guestinit binary not found: $INIT"
[[ $(head -c4 "$INIT" | od -An -tx1 | tr -d ' \n') == 7f454c46 ]] || die "$INIT is not an ELF binary"
# A dynamically linked /init cannot start: there is no libc in the initramfs.
if command -v readelf >/dev/null 2>&1; then
	phdrs=$(readelf -lW "$INIT" 2>/dev/null || true)
	! grep -q 'INTERP' <<<"$phdrs" || die "$INIT is dynamically linked; build it static (CGO_ENABLED=0)"
fi
[[ -f $MODS/modules.order ]] || die "$MODS/modules.order not found; run kernel/fetch.sh first"

stage=$(mktemp -d "${TMPDIR:-/tmp}/mkinitramfs.XXXXXX")
outdir=$(dirname "$OUT")
mkdir -p "$outdir"
tmpout=$(mktemp "$outdir/.$(basename "$OUT").XXXXXX")
trap 'rm -rf "$stage" "$tmpout"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

install -d -m 0755 "$stage"/{dev,proc,sys,newroot,run,lib/modules}
install -d -m 1777 "$stage/tmp"
install -m 0755 "$INIT" "$stage/init"
n=0
while IFS= read -r ko; do
	[[ -n $ko ]] || continue
	[[ -f $MODS/$ko ]] || die "$MODS/modules.order lists $ko, which is not in $MODS"
	install -m 0644 "$MODS/$ko" "$stage/lib/modules/$ko"
	n=$((n + 1))
done <"$MODS/modules.order"
install -m 0644 "$MODS/modules.order" "$stage/lib/modules/modules.order"
extra=none
if [[ -n $ONDEMAND && -f $ONDEMAND/modules.dep ]]; then
	install -d -m 0755 "$stage/lib/modules/$krel"
	cp -a "$ONDEMAND/." "$stage/lib/modules/$krel/"
	extra="$(find "$ONDEMAND" -name '*.ko*' | wc -l) on demand"
else
	log "no on-demand modules (run kernel/ondemand.sh): the guest cannot run containers"
fi
if [[ $(id -u) -eq 0 ]]; then
	mknod -m 0600 "$stage/dev/console" c 5 1
else
	log "not root: no /dev/console node (the kernel's built-in initramfs provides one)"
fi

# Fixed mtimes and sorted names: identical inputs give an identical archive.
find "$stage" -exec touch -h -d @0 {} +
(cd "$stage" && find . -mindepth 1 -printf '%P\n' | LC_ALL=C sort |
	cpio -o -H newc --owner 0:0 --reproducible --quiet) >"$tmpout"
chmod 0644 "$tmpout"
mv -f "$tmpout" "$OUT"
log "$OUT: $(du -h "$OUT" | cut -f1), /init + $n modules + $extra ($(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2fs", b-a}'))"
