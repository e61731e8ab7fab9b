#!/usr/bin/env bash
# The README's first quick-start command (`make demo`): start hostd with its
# embedded defaults on a scratch data dir, run python3 in a fresh sandbox,
# print its output (42), and clean up everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/bin
DATA=$(mktemp -d /tmp/agentbox-demo.XXXXXX)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
HOSTD_PID=
cleanup() {
  if [[ -n $HOSTD_PID ]] && kill -0 "$HOSTD_PID" 2>/dev/null; then
    kill -TERM "$HOSTD_PID"; wait "$HOSTD_PID" 2>/dev/null || true
  fi
  rm -rf "$DATA"
}
trap cleanup EXIT

# The demo's hostd makes its own key (in $DATA/api-key): a key the user
# exported (as the README suggests) is for their own hostd, and with it set
# hostd would write no key file.
unset AGENTBOX_API_KEY
"$BIN/agentbox" serve --listen "127.0.0.1:$PORT" --data-dir "$DATA" 2>"$DATA/hostd.log" &
HOSTD_PID=$!
export AGENTBOX_URL=http://127.0.0.1:$PORT
for _ in $(seq 1 300); do
  curl -fsS "$AGENTBOX_URL/healthz" >/dev/null 2>&1 && break
  kill -0 "$HOSTD_PID" 2>/dev/null || { cat "$DATA/hostd.log" >&2; exit 1; }
  sleep 0.1
done
export AGENTBOX_API_KEY=$(cat "$DATA/api-key")
echo "hostd is up at $AGENTBOX_URL ($(curl -fsS "$AGENTBOX_URL/healthz"))" >&2
echo "+ agentbox run -- python3 -c 'print(6*7)'" >&2
"$BIN/agentbox" run -- python3 -c 'print(6*7)'
