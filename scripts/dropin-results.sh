#!/usr/bin/env bash
# scripts/dropin-results.sh - the field's own tools over the drop-in libraries against raw TCP
# measured by qperf in the same run, at 64 B and 64 KiB: a thin wrapper around scripts/perf.sh
# (qperf's rc_* tests with tcp_bw/tcp_lat, perftest's ib_write_bw/ib_send_lat/ib_read_lat),
# with CRC as the drop-in's default (optional: off unless the peer asks). Prints the markdown
# table; everything else (CSV, plots, logs) lands in build/perf-dropin.
#
# Usage: scripts/dropin-results.sh [PASSES]   (default 1; each pass interleaves all tests)
# Env:   RNIC (default build/rnic), PORT_BASE (see scripts/perf.sh --help)
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec bash "$SRC/scripts/perf.sh" --passes "${1:-1}" --sizes 64,64K --only qperf,perftest --crc optional \
  --out "$SRC/build/perf-dropin"
