#!/usr/bin/env bash
# Install the Debian packages agentbox needs on a fresh Debian 12 (bookworm) host.
#
# Uses only the apt sources already configured on the machine. Quick no-op when
# everything is installed already. Must run as root (or with sudo available).
set -euo pipefail

log() { printf 'install-deps: %s\n' "$*" >&2; }

PACKAGES=(
	# VMM and disks
	qemu-system-x86 # qemu-system-x86_64 -M microvm (TCG on these machines)
	qemu-utils      # qemu-img: qcow2 bases and overlays
	e2fsprogs       # mkfs.ext4 -d
	busybox-static  # /bin/busybox: the busybox-only image of the OCI template test
	# guest root filesystems
	debootstrap
	debian-archive-keyring # debootstrap verifies the Release file against it
	ca-certificates        # in case the configured mirror is https
	# guest kernel and initramfs (kernel/fetch.sh, images/mkinitramfs.sh)
	kmod      # modinfo, depmod
	lz4       # the 6.1 bzImage payload is lz4
	zstd      # .ko.zst modules, zstd payloads (6.12+)
	xz-utils  # .ko.xz modules
	cpio      # initramfs
	gzip      # compressed archives
	file      # sanity checks (ELF, qcow2)
	binutils  # readelf: checks the PVH ELF note of vmlinux
	# protocol
	protobuf-compiler # protoc for proto/
	# git mounts and their tests (hostd/mounts, internal/gittest: a real git server)
	git
	# the fleet (fleet/, internal/pgserver, internal/fleettest): a real PostgreSQL that
	# the tests start as the postgres user on a temp dir, and hosts in namespaces
	postgresql
	iproute2
	# service URL and PTY tests (hostd/svc_test.go)
	chromium # headless browser that opens a sandbox's service URL
	tmux     # drives `agentbox exec -it` in a real terminal
	# the web console (console/: make console, and its browser test in make test-vm)
	nodejs # Debian 12: 18.19
	npm
	# SDK suites (sdk/sdktest): the Python SDK, its tests and its offline install
	python3-httpx
	python3-websockets
	python3-pytest
	python3-pytest-asyncio
	python3-setuptools # the build backend of sdk/python (pip install --no-build-isolation)
	python3-wheel
	python3-pip
	python3-yaml # the Python SDK's request-shape test reads the spec
	# the TypeScript SDK's suite (sdk/sdktest): Debian's Node (18 on bookworm) and npm
	nodejs
	npm
	# the quick start itself: make, cgo for `go test -race`, curl in ci/demo.sh
	make
	gcc
	libc6-dev
	curl
)

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
	if command -v sudo >/dev/null 2>&1; then
		SUDO=(sudo)
	else
		log "must run as root (or with sudo installed)"
		exit 1
	fi
fi

# installed P: package P is installed, or an installed package provides it
# (NodeSource's nodejs provides, and conflicts with, Debian's npm).
installed() {
	local st
	st=$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true)
	[[ $st == installed ]] && return 0
	dpkg-query -W -f='${db:Status-Status} ${Provides}\n' 2>/dev/null |
		awk -v p="$1" '$1 == "installed" { for (i = 2; i <= NF; i++) { sub(/,$/, "", $i); if ($i == p) found = 1 } } END { exit !found }'
}

missing=()
for p in "${PACKAGES[@]}"; do
	installed "$p" || missing+=("$p")
done

if [[ ${#missing[@]} -eq 0 ]]; then
	log "all ${#PACKAGES[@]} packages already installed"
	exit 0
fi

log "missing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
log "apt-get update"
"${SUDO[@]}" apt-get update -q >&2
log "apt-get install --no-install-recommends ${missing[*]}"
"${SUDO[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" >&2

# Verify: a package that apt could not install must fail the script here, not
# some later step.
still=()
for p in "${missing[@]}"; do
	installed "$p" || still+=("$p")
done
if [[ ${#still[@]} -gt 0 ]]; then
	log "still not installed: ${still[*]}"
	exit 1
fi
log "done"
