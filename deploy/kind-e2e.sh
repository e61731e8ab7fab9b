#!/usr/bin/env bash
# End-to-end on a throwaway kind cluster: one node labelled for KVM, the
# agentbox image built and loaded, overlays/kind applied (placeholder
# secrets, a throwaway PostgreSQL), rollouts awaited, then a sandbox
# created and `echo ok` run in it through the gateway. The cluster is
# deleted on exit, whatever happens.
#
# Needs a working Docker engine, kind, kubectl, /dev/kvm (kind's node is a
# privileged container that passes it on) and the guest assets in
# /var/cache/agentbox (`make assets`), which are mounted into the node.
# Where any of these is missing it prints `SKIP: <why>` and exits 0.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
CLUSTER=${KIND_CLUSTER:-agentbox-e2e-$$}
ASSETS=${AGENTBOX_CACHE:-/var/cache/agentbox}

skip() {
	echo "SKIP: $*"
	exit 0
}

command -v docker >/dev/null 2>&1 || skip "docker is not installed"
docker info >/dev/null 2>&1 || skip "docker's engine is not reachable (docker info fails)"
command -v kind >/dev/null 2>&1 || skip "kind is not installed"
command -v kubectl >/dev/null 2>&1 || skip "kubectl is not installed"
[[ -c /dev/kvm && -r /dev/kvm && -w /dev/kvm ]] || skip "/dev/kvm is missing or not usable by $(id -un)"
[[ -e $ASSETS/kernel/vmlinux && -e $ASSETS/images/base.qcow2 ]] || skip "no guest assets in $ASSETS (run make assets)"

log() { printf 'kind-e2e: %s\n' "$*" >&2; }
WORK=$(mktemp -d)
PF_PID=
cleanup() {
	if [[ -n $PF_PID ]]; then kill "$PF_PID" 2>/dev/null || true; fi
	log "deleting cluster $CLUSTER"
	kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
	rm -rf "$WORK"
}
trap cleanup EXIT

cat >"$WORK/kind.yaml" <<KIND
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
nodes:
  - role: control-plane
    labels:
      agentbox.dev/kvm: "true"
    extraMounts:
      - hostPath: /dev/kvm
        containerPath: /dev/kvm
      - hostPath: $ASSETS
        containerPath: /var/cache/agentbox
KIND

log "building the image"
docker build -f "$HERE/Dockerfile" -t agentbox:kind "$ROOT"
log "creating cluster $CLUSTER"
kind create cluster --name "$CLUSTER" --config "$WORK/kind.yaml" --wait 120s
kind load docker-image --name "$CLUSTER" agentbox:kind

log "applying overlays/kind"
kubectl apply -k "$HERE/overlays/kind"
kubectl -n agentbox rollout status deploy/agentbox-postgres --timeout=180s
kubectl -n agentbox rollout status deploy/agentbox-gateway --timeout=180s
kubectl -n agentbox rollout status ds/agentbox-hostd --timeout=300s

log "port-forwarding the gateway"
kubectl -n agentbox port-forward svc/agentbox-gateway 17080:7080 >"$WORK/pf.log" 2>&1 &
PF_PID=$!
export AGENTBOX_URL=http://127.0.0.1:17080
ready=
for _ in $(seq 60); do
	if curl -fsS "$AGENTBOX_URL/readyz" >/dev/null 2>&1; then ready=1; break; fi
	sleep 1
done
[[ -n $ready ]] || { log "the gateway never became ready"; cat "$WORK/pf.log" >&2; exit 1; }

# overlays/kind's operator key is an admin key of this throwaway fleet.
export AGENTBOX_API_KEY=kind-only-operator-key
AB=(kubectl -n agentbox exec deploy/agentbox-gateway -- env "AGENTBOX_URL=http://127.0.0.1:7080" "AGENTBOX_API_KEY=$AGENTBOX_API_KEY" /usr/local/bin/agentbox)
if command -v go >/dev/null 2>&1; then
	(cd "$ROOT" && go build -o "$WORK/agentbox" ./cmd/agentbox)
	AB=("$WORK/agentbox")
fi
"${AB[@]}" host ls
id=$("${AB[@]}" create)
log "sandbox $id"
out=$("${AB[@]}" exec "$id" -- echo ok)
"${AB[@]}" rm "$id" || true
[[ $out == ok ]] || { log "exec printed '$out', want ok"; exit 1; }
echo "PASS: echo ok through the gateway on kind"
