#!/usr/bin/env bash
# Fetch the guest kernel's on-demand modules: what containers need (overlay,
# bridge, veth, netfilter for dockerd's iptables rules) as a standard module
# tree that the guest's own modprobe and the kernel's module autoloading use.
# guestinit does not load them at boot; a guest that runs containers loads
# them when it needs them (dockerd runs modprobe, iptables' netlink requests
# autoload the nf_* and xt_* modules), so every other boot costs nothing.
#
#   $CACHE/kernel-ondemand/<release>_<pkgversion>/<release>/
#       *.ko                  the modules and their dependencies, flat
#       modules.dep, modules.alias, ... (.bin)   from depmod
#       modules.builtin, modules.builtin.modinfo from the package
#
# It needs the kernel of kernel/fetch.sh ($CACHE/kernel/VERSION) and fetches
# the same package again with `apt-get download`. Separate from fetch.sh so
# that fetch.sh's cached tree, shared by every checkout on a machine, is not
# rebuilt when this set changes. Idempotent: a tree built by this same
# version of the script is kept. images/mkinitramfs.sh packs the tree as the
# initramfs's /lib/modules/<release>; see kernel/README.md.
set -euo pipefail

CACHE=${AGENTBOX_CACHE:-/var/cache/agentbox}
KDIR=$CACHE/kernel
ODIR=$CACHE/kernel-ondemand

# Modules (with their dependencies) a container engine needs in the guest.
# Debian 12's docker.io uses iptables-nft (nf_tables + nft_compat for the xt
# matches); the legacy ip_tables tables are here too for iptables-legacy.
WANT=(
	overlay
	bridge br_netfilter veth
	nf_tables nft_compat nft_chain_nat nft_ct nft_nat nft_masq nft_redir
	nft_reject_inet nft_fib_inet nft_fib_ipv4 nft_fib_ipv6 nft_limit
	nf_conntrack nf_nat nf_conntrack_netlink
	xt_conntrack xt_addrtype xt_MASQUERADE xt_nat xt_REDIRECT xt_comment xt_mark
	xt_multiport xt_tcpudp xt_state xt_limit xt_statistic
	ip_tables iptable_nat iptable_filter iptable_mangle ipt_REJECT
	ip6_tables ip6table_nat ip6table_filter ip6table_mangle ip6t_REJECT
)

SELF=$(readlink -f "${BASH_SOURCE[0]}")
T0=$(date +%s.%N)
log() { printf 'kernel/ondemand: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2fs", b-a}'; }

for tool in apt-get dpkg xz modprobe depmod sha256sum flock; do
	command -v "$tool" >/dev/null 2>&1 || die "missing tool: $tool (run ci/install-deps.sh)"
done
[[ -f $KDIR/VERSION ]] || die "$KDIR/VERSION not found; run kernel/fetch.sh first"
read -r krel img_ver <"$KDIR/VERSION"
[[ -n $krel && -n $img_ver ]] || die "$KDIR/VERSION is malformed"
id="${krel}_${img_ver//:/_}"
stamp="$(sha256sum "$SELF" | cut -d' ' -f1)"

mkdir -p "$ODIR"
exec 9>"$ODIR/.lock"
flock 9
if [[ -f $ODIR/$id/.complete && $(cat "$ODIR/$id/.complete") == "$stamp" ]]; then
	log "cached: $ODIR/$id ($(elapsed "$T0"))"
	exit 0
fi

rm -rf "$ODIR"/.tmp.*
tmp=$(mktemp -d "$ODIR/.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
chmod 0755 "$tmp"
mkdir -p "$tmp/deb" "$tmp/x" "$tmp/out/$krel"
if id _apt >/dev/null 2>&1; then chown _apt "$tmp/deb"; fi

pkg=linux-image-$krel
t=$(date +%s.%N)
(cd "$tmp/deb" && apt-get download -q "$pkg=$img_ver" >&2) ||
	die "apt-get download $pkg=$img_ver failed"
debs=("$tmp/deb/${pkg}_"*.deb)
[[ -f ${debs[0]} ]] || die "apt-get download did not produce ${pkg}_*.deb"
dpkg -x "${debs[0]}" "$tmp/x"
mroot=$tmp/x/lib/modules/$krel
[[ -d $mroot ]] || die "package has no /lib/modules/$krel"
log "downloaded and unpacked $pkg $img_ver in $(elapsed "$t")"

# modprobe --show-depends lists each module's files in load order
# ("insmod PATH"), dependencies first, and "builtin NAME" for built-ins.
t=$(date +%s.%N)
depmod -b "$tmp/x" "$krel"
out=$tmp/out/$krel
declare -A SEEN=()
for m in "${WANT[@]}"; do
	lines=$(modprobe -d "$tmp/x" -S "$krel" --show-depends "$m" 2>&1) ||
		die "module $m: $lines"
	while read -r kind path _; do
		[[ $kind == insmod && -z ${SEEN[$path]:-} ]] || continue
		SEEN[$path]=1
		cp "$path" "$out/"
	done <<<"$lines"
done
# xz (crc32 check, as the kernel's own decompressor wants) keeps them small in
# the guest's memory: the initramfs stays in RAM for the VM's life. The
# guest's modprobe (kmod) decompresses them.
xz --check=crc32 -q "$out"/*.ko
cp "$mroot/modules.builtin" "$mroot/modules.builtin.modinfo" "$out/"
: >"$out/modules.order"
# depmod wants the tree under lib/modules/<release> of its base dir.
mkdir -p "$tmp/base/lib/modules"
ln -s "$out" "$tmp/base/lib/modules/$krel"
depmod -b "$tmp/base" "$krel"
rm -f "$out/modules.order" "$out/modules.devname"
chmod -R a+rX "$tmp/out"
log "${#SEEN[@]} modules ($(du -sh "$out" | cut -f1)) in $(elapsed "$t")"

printf '%s\n' "$stamp" >"$tmp/out/.complete"
if [[ -e $ODIR/$id ]]; then mv -T "$ODIR/$id" "$tmp/old"; fi
mv -T "$tmp/out" "$ODIR/$id"
log "installed $ODIR/$id ($(elapsed "$T0") total)"
