#!/usr/bin/env bash
# The main demo: installs dependencies, builds, starts two emulated RNIC processes on this host
# that walk through Send, RDMA Write, RDMA Read, an atomic, Send with Invalidate and a deliberate
# protection error, then decodes the client's recorded capture.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
out=$(mktemp -d /tmp/rnic-demo.XXXXXX)
echo
./build/rnic demo --crc required --pcap-dir "$out"
echo
echo "== rnic decode $out/demo-client.pcap   (what the client's RNIC sent and received)"
./build/rnic decode "$out/demo-client.pcap"

# The buffer-enlargement protocol (seeds 000-002) between two processes: first three messages
# drawn step by step, then 100 random messages (0 - 1 MiB) each way, verified in order.
enlarge() {  # enlarge "CLIENT OPTIONS" (the client tells the server what the run is)
  local pf="$out/enlarge.port"
  rm -f "$pf"
  # shellcheck disable=SC2086
  ./build/rnic enlarge-demo --server --port 0 --port-file "$pf" --quiet &
  local srv=$!
  for _ in $(seq 200); do [ -s "$pf" ] && break; sleep 0.05; done
  # shellcheck disable=SC2086
  ./build/rnic enlarge-demo --client 127.0.0.1 --port "$(cat "$pf")" $1 2>/dev/null
  wait "$srv"
}
echo
echo "== rnic enlarge-demo --timeline: small buffers, enlarged for the one connection that needs it"
enlarge "--messages 3 --max-size 300000 --direction to-server --connections 1 --timeline"
echo
echo "== rnic enlarge-demo: 100 random messages each way, three connections"
enlarge "--messages 100"
