#!/usr/bin/env bash
# scripts/dropin-results.sh - the field's own tools over the drop-in libraries, against raw TCP
# measured by qperf in the same run: qperf's rc_* tests and tcp_bw/tcp_lat, perftest's
# ib_write_bw/ib_read_bw/ib_send_bw and ib_*_lat, all unmodified through `rnic run`, on
# 127.0.0.1. Prints markdown tables with each figure's ratio to raw TCP from the same pass.
# These machines are shared and noisy: quote ratios, not absolute figures.
#
# Usage: scripts/dropin-results.sh [PASSES]   (default 1; each pass interleaves all tests)
# Env:   RNIC (default build/rnic), PORT_BASE (default 19900)
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RNIC="${RNIC:-$SRC/build/rnic}"
PASSES="${1:-1}"
BASE="${PORT_BASE:-19900}"
OUT=$(mktemp -d)
trap 'pkill -f "qperf -lp $BASE" 2>/dev/null || true; rm -rf "$OUT"' EXIT
for p in qperf ib_write_bw; do command -v "$p" >/dev/null || { echo "dropin-results: $p missing (scripts/install-deps.sh)" >&2; exit 2; }; done

# qperf FIGURE -> MB/s or us
qperf_num() {  # qperf_num FILE TEST: the figure of TEST, in MB/s (bw) or us (latency)
  awk -v t="$2:" '$1 == t { on = 1; next } on && $2 == "=" { v = $3; u = $4;
    if (u == "GB/sec") v *= 1000; else if (u == "KB/sec") v /= 1000;
    else if (u == "ms") v *= 1000; else if (u == "ns") v /= 1000;
    print v; exit }' "$1"
}

perftest() {  # perftest PROG PORT ARGS...: runs the pair, prints the client's last result row
  local prog=$1 port=$2; shift 2
  timeout 120 "$RNIC" run -- "$prog" -R -F -p "$port" "$@" > "$OUT/s.out" 2>&1 &
  local spid=$!
  sleep 0.5
  timeout 120 "$RNIC" run -- "$prog" -R -F -p "$port" "$@" 127.0.0.1 > "$OUT/c.out" 2>&1 || {
    echo "dropin-results: $prog $* failed:" >&2; tail -5 "$OUT/c.out" >&2; }
  wait "$spid" || true
  awk '/#bytes/ { on = 1; next } on && $1 ~ /^[0-9]+$/ { row = $0 } END { print row }' "$OUT/c.out"
}

timeout 600 "$RNIC" run --rnr-wait 1000 -- qperf -lp "$BASE" > "$OUT/qserver.out" 2>&1 &
sleep 0.5
for pass in $(seq 1 "$PASSES"); do
  port=$((BASE + 10 * pass))
  timeout 120 "$RNIC" run --rnr-wait 1000 -- qperf -cm1 -lp "$BASE" -t 3 -m 64K 127.0.0.1 \
    tcp_bw rc_bw rc_rdma_write_bw rc_rdma_read_bw > "$OUT/qbw.out" 2>&1 ||
    { echo "dropin-results: qperf (bandwidth, pass $pass) failed:" >&2; tail -5 "$OUT/qbw.out" >&2; }
  timeout 120 "$RNIC" run --rnr-wait 1000 -- qperf -cm1 -lp "$BASE" -t 3 -m 64 127.0.0.1 \
    tcp_lat rc_lat rc_rdma_write_lat rc_rdma_read_lat > "$OUT/qlat.out" 2>&1 ||
    { echo "dropin-results: qperf (latency, pass $pass) failed:" >&2; tail -5 "$OUT/qlat.out" >&2; }
  for t in tcp_bw rc_bw rc_rdma_write_bw rc_rdma_read_bw; do
    echo "$pass q $t $(qperf_num "$OUT/qbw.out" "$t")" >> "$OUT/all"
  done
  for t in tcp_lat rc_lat rc_rdma_write_lat rc_rdma_read_lat; do
    echo "$pass q $t $(qperf_num "$OUT/qlat.out" "$t")" >> "$OUT/all"
  done
  # perftest: BW average (MB/s, column 4) and t_avg (us, column 6)
  for prog in ib_write_bw ib_read_bw ib_send_bw; do
    row=$(perftest "$prog" $((port + 1)) -s 65536 -n 5000)
    echo "$pass p $prog $(awk '{ print $4 }' <<< "$row")" >> "$OUT/all"
    port=$((port + 1))
  done
  for prog in ib_write_lat ib_read_lat ib_send_lat; do
    row=$(perftest "$prog" $((port + 1)) -s 64 -n 5000)
    echo "$pass p $prog $(awk '{ print $6 }' <<< "$row")" >> "$OUT/all"
    port=$((port + 1))
  done
done

median() {  # median TEST: the median over the passes
  awk -v t="$1" '$3 == t && $4 != "" { print $4 }' "$OUT/all" | sort -g |
    awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2];
                              else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'; }
tbw=$(median tcp_bw); tlat=$(median tcp_lat)
echo "Median of $PASSES pass(es) on $(nproc) cores, $(date -u +%Y-%m-%d); raw TCP from qperf in the same run: tcp_bw $tbw MB/s (64 KiB), tcp_lat $tlat us (64 B)."
echo
echo "| qperf -cm1 | figure | vs raw TCP |"
echo "| --- | --- | --- |"
for t in rc_bw rc_rdma_write_bw rc_rdma_read_bw; do
  echo "| $t (64 KiB) | $(median $t) MB/s | $(ratio "$(median $t)" "$tbw")x tcp_bw |"
done
for t in rc_lat rc_rdma_write_lat rc_rdma_read_lat; do
  echo "| $t (64 B) | $(median $t) us | $(ratio "$tlat" "$(median $t)")x tcp_lat speed |"
done
echo
echo "| perftest -R | figure | vs raw TCP |"
echo "| --- | --- | --- |"
for t in ib_write_bw ib_read_bw ib_send_bw; do
  echo "| $t -s 65536 -n 5000 | $(median $t) MB/s | $(ratio "$(median $t)" "$tbw")x tcp_bw |"
done
for t in ib_write_lat ib_read_lat ib_send_lat; do
  echo "| $t -s 64 -n 5000 (t_avg) | $(median $t) us | $(ratio "$tlat" "$(median $t)")x tcp_lat speed |"
done
