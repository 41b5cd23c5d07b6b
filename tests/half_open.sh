#!/bin/bash
# ctest LlpTimeout.HalfOpenConnectionEndsBothSides: two rnic xfer processes in a network
# namespace of their own; mid-transfer the link vanishes (lo taken down: no FIN, no RST, nothing
# arrives any more).
#  1. With --llp-timeout 2000 both must end within a few seconds, each saying the connection was
#     lost to the LLP timeout, with their work requests flushed. (TCP alone would retransmit for
#     some 15 minutes on the sending side and never notice on the receiving one.)
#  2. With --llp-timeout 0 (the kernel's defaults) the programs' own --timeout (3 s) ends them, with
#     Writes still posted: neither may crash (the client once freed its buffers before the QP
#     whose flush still read them).
# Skipped (exit 77) only where no network namespace can be made.
set -uo pipefail
RNIC=${1:?usage: half_open.sh RNIC}
command -v ip >/dev/null || { echo "SKIPPED: no ip command (apt-get install iproute2)"; exit 77; }
if [ -z "${HALF_OPEN_NETNS:-}" ]; then
  for u in "unshare -n" "unshare -rn"; do
    if $u true 2>/dev/null; then exec $u env HALF_OPEN_NETNS=1 bash "$0" "$@"; fi
  done
  echo "SKIPPED: no network namespace can be made here (unshare -n / -rn refused)"; exit 77
fi
W=$(mktemp -d); trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$W"' EXIT
fails=0

# scenario LLP_MS EXPECT PORT: a transfer, then the link goes; EXPECT "llp" (both name the LLP
# timeout and flush; their own --timeout is far longer, so nothing else can end them) or "own"
# (each ends by its own --timeout, without a crash)
scenario() {
  local llp=$1 expect=$2 port=$3 own=3000 pid out rc took side t0
  [ "$expect" = llp ] && own=15000
  ip link set lo up || { echo "FAILED: cannot bring lo up in the namespace"; fails=1; return; }
  "$RNIC" xfer --server --port "$port" --llp-timeout "$llp" --timeout $own --sizes 64,1048576 \
    > "$W/srv$llp" 2>&1 &
  local S=$!
  for _ in $(seq 1 300); do ss -ltnH "sport = :$port" | grep -q . && break; sleep 0.1; done
  "$RNIC" xfer --client 127.0.0.1 --port "$port" --llp-timeout "$llp" --timeout $own \
    --sizes 64,1048576 --ops write --loop 1000000 > "$W/cli$llp" 2>&1 &
  local C=$!
  for _ in $(seq 1 100); do grep -q "write loop running" "$W/cli$llp" && break; sleep 0.1; done
  if ! grep -q "write loop running" "$W/cli$llp"; then
    echo "FAILED: the transfer never started"; cat "$W/cli$llp" "$W/srv$llp"; fails=1
    kill -9 $S $C 2>/dev/null; wait $S $C 2>/dev/null; return
  fi
  sleep 0.5
  ip link set lo down
  t0=$SECONDS
  for side in client server; do
    pid=$C; out=$W/cli$llp; [ $side = server ] && { pid=$S; out=$W/srv$llp; }
    for _ in $(seq 1 200); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
    if kill -0 $pid 2>/dev/null; then
      echo "FAILED ($llp): the $side still runs $((SECONDS - t0)) s after the link vanished"
      fails=1; kill -9 $pid; continue
    fi
    wait $pid; rc=$?
    took=$((SECONDS - t0))
    if [ $rc = 0 ]; then echo "FAILED ($llp): the $side exited 0 although its connection was lost"; fails=1; fi
    if [ $rc -gt 128 ]; then echo "FAILED ($llp): the $side died of signal $((rc - 128))"; tail -3 "$out"; fails=1; fi
    if [ "$expect" = llp ]; then
      if ! grep -q "LLP timeout" "$out"; then echo "FAILED: the $side did not name the LLP timeout:"; tail -3 "$out"; fails=1; fi
      if ! grep -qi "flushed" "$out"; then echo "FAILED: the $side reported no flushed work request:"; tail -3 "$out"; fails=1; fi
    fi
    echo "--llp-timeout $llp: $side ended $took s after the link vanished (exit $rc): $(grep -v '^\[' "$out" | tail -1 | cut -c1-150)"
  done
}
scenario "${HALF_OPEN_LLP:-2000}" llp 7300
scenario 0 own 7301
[ $fails = 0 ] && echo "both scenarios ended as they should"
exit $fails
