#!/usr/bin/env bash
# The main demo: installs dependencies, builds, and decodes a real capture of Linux siw
# (rping over SoftiWARP) and a generated one with CRC and markers.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
echo
echo "== rnic decode pcap_traces/siw/rping_lo.pcap   (a real Linux siw rping session)"
./build/rnic decode pcap_traces/siw/rping_lo.pcap
echo
echo "== rnic decode pcap_traces/generated/mpa1_crc_markers.pcap   (every RDMAP opcode, CRC + markers)"
./build/rnic decode pcap_traces/generated/mpa1_crc_markers.pcap
