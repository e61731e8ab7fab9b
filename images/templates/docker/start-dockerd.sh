#!/bin/sh
# Start containerd and dockerd, detached, and wait until they answer: the
# docker template's last build step, so that the template's snapshot (and
# every sandbox made from it) has a running Docker. Also usable by hand
# after a cold boot.
#
# containerd is started here, not by dockerd: dockerd gives the containerd
# it starts itself a fixed time, which a loaded TCG guest can miss.
#
# The container modules come from the guest's on-demand module tree
# (kernel/ondemand.sh, /lib/modules/$(uname -r)); dockerd and iptables would
# load most of them themselves, loading them here first makes a missing one
# an error with its name instead of a broken bridge later.
set -eu
sock=/run/containerd/containerd.sock
if docker info >/dev/null 2>&1; then
	echo "dockerd already running"
	exit 0
fi
modprobe -a overlay bridge br_netfilter veth \
	nf_tables nft_compat nft_chain_nat nft_ct nft_masq nft_nat \
	nf_conntrack nf_nat xt_conntrack xt_addrtype xt_MASQUERADE xt_nat xt_tcpudp xt_comment xt_mark
mkdir -p /var/log
t0=$(date +%s)

# wait_for NAME PID LOG CMD...: until CMD succeeds, while PID lives (10 min).
wait_for() {
	name=$1 pid=$2 log=$3
	shift 3
	i=0
	until "$@" >/dev/null 2>&1; do
		i=$((i + 1))
		if [ "$i" -ge 1200 ] || ! kill -0 "$pid" 2>/dev/null; then
			echo "$name did not become ready; the last lines of $log:" >&2
			tail -n 40 "$log" >&2
			exit 1
		fi
		sleep 0.5
	done
}

if ! ctr --address "$sock" version >/dev/null 2>&1; then
	# setsid: its own session, outside the build exec's process group.
	setsid containerd >/var/log/containerd.log 2>&1 </dev/null &
	wait_for containerd $! /var/log/containerd.log ctr --address "$sock" version
fi
echo "containerd ready in $(($(date +%s) - t0))s"
setsid dockerd --containerd="$sock" >/var/log/dockerd.log 2>&1 </dev/null &
wait_for dockerd $! /var/log/dockerd.log docker info
echo "dockerd ready in $(($(date +%s) - t0))s: $(docker version --format '{{.Server.Version}}')"
