#!/usr/bin/env bash
# Fetch Debian bookworm's cloud kernel and turn it into guest boot assets:
#
#   $CACHE/kernel/<release>_<pkgversion>/vmlinux   PVH-bootable ELF (from the bzImage)
#                                      /config    the kernel's .config
#                                      /VERSION   "<release> <pkgversion>"
#                                      /modules/  flat plain .ko files + modules.order
#   $CACHE/kernel/{vmlinux,config,VERSION,modules} -> <release>_<pkgversion>/...
#
# CACHE defaults to /var/cache/agentbox (override with AGENTBOX_CACHE). Nothing
# is installed on the host and nothing goes into /boot: the packages are fetched
# with `apt-get download` from the machine's configured apt sources and unpacked
# with `dpkg -x` into a temporary directory. See kernel/README.md.
#
# Idempotent: when the candidate kernel is already in the cache (built by this
# same version of this script) it only re-points the symlinks.
set -euo pipefail

CACHE=${AGENTBOX_CACHE:-/var/cache/agentbox}
KDIR=$CACHE/kernel
META=${AGENTBOX_KERNEL_PACKAGE:-linux-image-cloud-amd64}

# Modules the guest needs, in the order guestinit should load them; their
# dependencies are added (before them) by resolve() below. Modules that are
# built into the kernel are skipped.
WANT_MODULES=(
	virtio_ring virtio virtio_mmio
	vsock vmw_vsock_virtio_transport_common vmw_vsock_virtio_transport
	virtio_blk
	failover net_failover virtio_net
	virtio_console
	virtio_pci # Cloud Hypervisor attaches every device over virtio-pci
	fuse       # mounts: guestinit serves them as FUSE filesystems (guestinit/mount)
)

SELF=$(readlink -f "${BASH_SOURCE[0]}")
T0=$(date +%s.%N)
log() { printf 'kernel/fetch: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2fs", b-a}'; }

for tool in apt-get apt-cache dpkg dpkg-deb lz4 modinfo modprobe depmod sha256sum flock grep tail; do
	command -v "$tool" >/dev/null 2>&1 || die "missing tool: $tool (run ci/install-deps.sh)"
done

mkdir -p "$KDIR"
exec 9>"$KDIR/.lock"
flock 9

# ---------------------------------------------------------------- resolve
# Two apt-cache calls only: on hosts with Dir::Cache::pkgcache "" (Debian's
# docker images) each one rebuilds the cache, ~1 s. awk reads all its input (an
# early exit would SIGPIPE apt-cache and, with pipefail, fail the pipeline).
image_pkg() { # the one linux-image-<release> package the metapackage depends on
	apt-cache depends "$META" 2>/dev/null |
		awk '$1=="Depends:" && $2 ~ /^linux-image-[0-9]/ && !n++ {print $2}'
}
img_pkg=$(image_pkg || true)
if [[ -z $img_pkg ]]; then
	log "$META not resolvable from the apt lists; running apt-get update"
	apt-get update -q >&2
	img_pkg=$(image_pkg || true)
	[[ -n $img_pkg ]] || die "could not resolve the linux-image package that $META depends on (is it in the configured apt sources?)"
fi
# "pkg:" lines at column 0, then "  Candidate: <version>".
read -r meta_ver img_ver < <(apt-cache policy "$META" "$img_pkg" 2>/dev/null |
	awk -v a="$META" -v b="$img_pkg" '/^[^ ]/{p=$1; sub(/:$/,"",p)} $1=="Candidate:"{c[p]=$2} END{print c[a], c[b]}') || true
for v in "${meta_ver:-}" "${img_ver:-}"; do
	[[ -n $v && $v != "(none)" ]] || die "no candidate version for $META or $img_pkg"
done
krel=${img_pkg#linux-image-}
id="${krel}_${img_ver//:/_}"
stamp="$(sha256sum "$SELF" | cut -d' ' -f1)"
log "$META $meta_ver -> $img_pkg $img_ver (release $krel)"

link() { # link TARGET NAME: atomically (re)point $KDIR/NAME at TARGET
	ln -sfn "$1" "$KDIR/.$2.new"
	mv -Tf "$KDIR/.$2.new" "$KDIR/$2"
}
point_links() {
	link "$id/vmlinux" vmlinux
	link "$id/config" config
	link "$id/VERSION" VERSION
	link "$id/modules" modules
}

if [[ -f $KDIR/$id/.complete && $(cat "$KDIR/$id/.complete") == "$stamp" ]]; then
	point_links
	log "cached: $KDIR/$id ($(elapsed "$T0"))"
	exit 0
fi

# ---------------------------------------------------------------- download
# We hold the lock: temp dirs left by a run that was killed outright are stale.
rm -rf "$KDIR"/.tmp.*
tmp=$(mktemp -d "$KDIR/.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
chmod 0755 "$tmp"
mkdir -p "$tmp/deb" "$tmp/x" "$tmp/out/modules"
# apt-get download drops privileges to _apt; let it write here.
if id _apt >/dev/null 2>&1; then chown _apt "$tmp/deb"; fi

t=$(date +%s.%N)
log "downloading $META=$meta_ver $img_pkg=$img_ver"
(cd "$tmp/deb" && apt-get download -q "$META=$meta_ver" "$img_pkg=$img_ver" >&2)
debs=("$tmp/deb/${img_pkg}_"*.deb)
deb=${debs[0]}
[[ -f $deb ]] || die "apt-get download did not produce ${img_pkg}_*.deb"
log "downloaded $(du -h "$deb" | cut -f1) in $(elapsed "$t")"

t=$(date +%s.%N)
dpkg -x "$deb" "$tmp/x"
bz=$tmp/x/boot/vmlinuz-$krel
cfg=$tmp/x/boot/config-$krel
mroot=$tmp/x/lib/modules/$krel
[[ -f $bz ]] || die "package has no /boot/vmlinuz-$krel"
[[ -f $cfg ]] || die "package has no /boot/config-$krel"
[[ -d $mroot ]] || die "package has no /lib/modules/$krel"
log "unpacked in $(elapsed "$t")"

# ---------------------------------------------------------------- vmlinux
# The bzImage is a boot stub plus a compressed vmlinux. Find the payload by its
# magic (lz4 legacy for 6.1; others kept for later kernels), decompress from
# each candidate offset until the output is an ELF. Decompressors complain about
# the trailing bytes after the payload; their status is ignored, the ELF magic
# and the PVH note are what count.
t=$(date +%s.%N)
vmlinux=$tmp/out/vmlinux
is_elf() { [[ $(head -c4 "$1" | od -An -tx1 | tr -d ' \n') == 7f454c46 ]]; }
extract() { # extract MAGIC_REGEX CMD...
	local magic=$1 off
	shift
	command -v "$1" >/dev/null 2>&1 || return 1
	for off in $(LC_ALL=C grep -obUaP "$magic" "$bz" | cut -d: -f1); do
		tail -c +"$((off + 1))" "$bz" | "$@" >"$vmlinux" 2>/dev/null || true
		if [[ -s $vmlinux ]] && is_elf "$vmlinux"; then
			log "payload at offset $off ($*)"
			return 0
		fi
	done
	return 1
}
if ! { extract '\x02\x21\x4c\x18' lz4 -dc ||
	extract '\x28\xb5\x2f\xfd' zstd -dcq ||
	extract '\xfd\x37\x7a\x58\x5a\x00' xz -dcq ||
	extract '\x1f\x8b\x08' gzip -dcq; }; then
	die "no compressed ELF payload found in $bz"
fi
if command -v file >/dev/null 2>&1; then
	ftype=$(file -b "$vmlinux")
	[[ $ftype == "ELF 64-bit LSB executable, x86-64"* ]] ||
		die "extracted vmlinux is not an x86-64 ELF executable: $ftype"
fi
# PVH entry point: ELF note owner "Xen", type 18 (XEN_ELFNOTE_PHYS32_ENTRY).
# Without it neither QEMU (-kernel with an ELF) nor Cloud Hypervisor can boot it.
if command -v readelf >/dev/null 2>&1; then
	notes=$(readelf -n "$vmlinux" 2>/dev/null || true)
	grep -Eq '^[[:space:]]*Xen[[:space:]].*(\(0x0*12\)|PHYS32_ENTRY)' <<<"$notes" ||
		die "vmlinux has no PVH entry note (Xen note type 18, PHYS32_ENTRY); is CONFIG_PVH=y?"
	log "vmlinux has the PVH entry note"
else
	log "WARNING: readelf not found (binutils); PVH entry note not checked"
	grep -q '^CONFIG_PVH=y' "$cfg" || die "kernel config lacks CONFIG_PVH=y"
fi
log "vmlinux $(du -h "$vmlinux" | cut -f1) extracted in $(elapsed "$t")"

cp "$cfg" "$tmp/out/config"
printf '%s %s\n' "$krel" "$img_ver" >"$tmp/out/VERSION"

# ---------------------------------------------------------------- modules
t=$(date +%s.%N)
norm() { local n=${1##*/}; n=${n%%.ko*}; printf '%s' "${n//-/_}"; }

declare -A KO=()      # module name -> path in the package (maybe compressed)
declare -A BUILTIN=() # module name -> 1
declare -A STATE=()   # module name -> visiting | done
ORDER=()              # .ko basenames in load order

while IFS= read -r -d '' f; do
	KO[$(norm "$f")]=$f
done < <(find "$mroot" -type f \( -name '*.ko' -o -name '*.ko.xz' -o -name '*.ko.zst' -o -name '*.ko.gz' \) -print0)
if [[ -f $mroot/modules.builtin ]]; then
	while IFS= read -r f; do
		[[ -n $f ]] && BUILTIN[$(norm "$f")]=1
	done <"$mroot/modules.builtin"
else
	log "WARNING: no modules.builtin in the package; relying on the config"
fi
log "${#KO[@]} loadable modules, ${#BUILTIN[@]} built in"

# The root filesystem is ext4: load it as a module unless it is built in.
case $(grep -E '^(# )?CONFIG_EXT4_FS[= ]' "$cfg" || true) in
CONFIG_EXT4_FS=y) log "ext4 is built in (CONFIG_EXT4_FS=y)" ;;
CONFIG_EXT4_FS=m)
	log "ext4 is a module (CONFIG_EXT4_FS=m); adding it"
	WANT_MODULES+=(ext4)
	;;
*) die "kernel config has no ext4 support (CONFIG_EXT4_FS)" ;;
esac

# materialize NAME: plain .ko into out/modules; prints its path there.
materialize() {
	local src=${KO[$1]} base
	base=${src##*/}
	base=${base%.xz}
	base=${base%.zst}
	base=${base%.gz}
	local dst=$tmp/out/modules/$base
	case $src in
	*.ko) cp "$src" "$dst" ;;
	*.ko.xz) xz -dc "$src" >"$dst" ;;
	*.ko.zst) zstd -dcq "$src" >"$dst" ;;
	*.ko.gz) gzip -dc "$src" >"$dst" ;;
	esac
	chmod 0644 "$dst"
	printf '%s' "$dst"
}

# Soft dependencies are usually aliases ("crc32c", "crypto-crc32c"), not module
# names. depmod -b writes modules.alias etc. into the unpacked tree (not the
# host); modprobe -R resolves an alias with them.
depmod -b "$tmp/x" "$krel"
# soft_targets NAME: loadable modules to load for a softdep, none when the
# kernel has a built-in provider (e.g. crc32c_generic for "crc32c").
soft_targets() {
	local a=${1//-/_}
	if [[ -n ${BUILTIN[$a]:-} ]] ||
		grep -qzE "\.alias=($1|$a)\$" "$mroot/modules.builtin.modinfo" 2>/dev/null; then
		return 0
	fi
	[[ -n ${KO[$a]:-} ]] && { echo "$a"; return 0; }
	modprobe -d "$tmp/x" -S "$krel" -R "$1" 2>/dev/null || true
}

# resolve NAME REQUIRED(1|0) PARENT: depth-first, dependencies before dependents.
resolve() {
	local name=$1 required=$2 parent=$3 ko vm deps soft d st
	name=${name//-/_}
	case ${STATE[$name]:-} in
	done) return 0 ;;
	visiting) die "module dependency cycle at $name (from $parent)" ;;
	esac
	if [[ -n ${BUILTIN[$name]:-} ]]; then
		log "  $name: built in, skipped"
		STATE[$name]="done"
		return 0
	fi
	if [[ -z ${KO[$name]:-} ]]; then
		if [[ $required == 1 ]]; then
			die "module $name (needed by $parent) is neither built in nor shipped in $img_pkg"
		fi
		log "  $name: optional soft dependency of $parent not available, skipped"
		STATE[$name]="done"
		return 0
	fi
	STATE[$name]=visiting
	ko=$(materialize "$name")
	vm=$(modinfo -F vermagic "$ko")
	[[ $vm == "$krel "* ]] || die "$name: vermagic '$vm' does not match $krel"
	deps=$(modinfo -F depends "$ko")
	# softdep "pre:" modules are loaded first too (e.g. crc32c for ext4=m).
	soft=$(modinfo -F softdep "$ko" | awk '{p=0; for(i=1;i<=NF;i++){ if($i=="pre:"){p=1;continue} if($i ~ /:$/){p=0;continue} if(p) print $i }}')
	for d in $soft; do
		for st in $(soft_targets "$d"); do resolve "$st" 0 "$name"; done
	done
	for d in ${deps//,/ }; do resolve "$d" 1 "$name"; done
	STATE[$name]="done"
	ORDER+=("${ko##*/}")
	log "  $name: ${ko##*/}${deps:+ (depends: $deps)}"
}

for m in "${WANT_MODULES[@]}"; do resolve "$m" 1 guest; done
printf '%s\n' "${ORDER[@]}" >"$tmp/out/modules/modules.order"
log "${#ORDER[@]} modules resolved in $(elapsed "$t")"

# ---------------------------------------------------------------- install
printf '%s\n' "$stamp" >"$tmp/out/.complete"
chmod -R a+rX "$tmp/out"
if [[ -e $KDIR/$id ]]; then
	# Stale (built by another version of this script): move it aside; the
	# trap removes it with the rest of the temp dir.
	mv -T "$KDIR/$id" "$tmp/old"
fi
mv -T "$tmp/out" "$KDIR/$id"
point_links
log "installed $KDIR/$id: $(cat "$KDIR/$id/VERSION") ($(elapsed "$T0") total)"
