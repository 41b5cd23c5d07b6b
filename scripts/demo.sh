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
