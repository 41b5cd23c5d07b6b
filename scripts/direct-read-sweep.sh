#!/usr/bin/env bash
# The receive side's direct-read threshold, measured (docs/direct-reads.md): perftest's
# ib_send_bw and ib_write_bw over the drop-in (`rnic run --direct-min T`, CRC on), at each
# message size and each threshold T, in several interleaved passes. Payload runs of at least T
# octets are read from the socket straight into their target; shorter runs come through the
# staging buffer (one more copy) with the FPDUs around them, in one read.
#
#   scripts/direct-read-sweep.sh [--passes 3] [--sizes "512 1024 2048 4096 8192 16384"]
#                                [--thresholds "512 1024 2048 4096 off"] [--iters 20000]
#                                [--progs "ib_send_bw ib_write_bw"] [--out DIR]
#
# Prints, and writes to DIR/direct-reads.md, one markdown table per program: the median MB/s of
# each size and threshold over the passes, and its ratio to the default threshold (4096) of the
# same pass (the median of those ratios). DIR/runs.csv has every run, DIR/logs/ their outputs.
# These machines are shared and noisy: read the ratios, not the absolute figures.
# Env: RNIC (default build/rnic). Exit 2 for a bad option or a missing program, 1 when a run
# failed.
set -uo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
RNIC=${RNIC:-$HERE/build/rnic}
PASSES=3
SIZES="512 1024 2048 4096 8192 16384"
THRESHOLDS="512 1024 2048 4096 off"
ITERS=20000
PROGS="ib_send_bw ib_write_bw"
OUT=$HERE/bench-out/direct-reads
die() { echo "direct-read-sweep: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --passes) [[ ${2:-} =~ ^[1-9][0-9]?$ ]] || die "--passes ${2:-}: not 1..99"; PASSES=$2; shift 2 ;;
    --sizes) [[ ${2:-} =~ ^[[:space:]]*([0-9]+[[:space:]]*)+$ ]] || die "--sizes ${2:-}: not a list of octet counts"; SIZES=$2; shift 2 ;;
    --thresholds)
      [ $# -ge 2 ] && [ -n "${2// /}" ] || die "--thresholds needs a value"
      for t in $2; do
        [ "$t" = off ] || { [[ $t =~ ^[0-9]{1,10}$ ]] && [ "$t" -ge 64 ] && [ "$t" -le 1073741824 ]; } ||
          die "--thresholds: $t is neither octets from 64 to 1073741824 nor off"
      done
      THRESHOLDS=$2; shift 2 ;;
    --iters) [[ ${2:-} =~ ^[1-9][0-9]{0,7}$ ]] || die "--iters ${2:-}: not 1..99999999"; ITERS=$2; shift 2 ;;
    --progs)
      [ $# -ge 2 ] && [ -n "${2// /}" ] || die "--progs needs a value"
      for p in $2; do case $p in ib_send_bw|ib_write_bw) ;; *) die "--progs: $p is not ib_send_bw or ib_write_bw" ;; esac; done
      PROGS=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || die "--out needs a value"; OUT=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
[ -x "$RNIC" ] || die "no $RNIC (build first, or set RNIC)"
for p in $PROGS; do command -v "$p" > /dev/null || die "no $p (perftest: scripts/install-deps.sh)"; done
case " $THRESHOLDS " in *" 4096 "*) ;; *) die "--thresholds must include 4096 (the default, the ratios' base)" ;; esac
mkdir -p "$OUT/logs" || die "cannot make $OUT"
rm -f "$OUT"/logs/*.log
CSV=$OUT/runs.csv
echo "prog,pass,size,threshold,MBps" > "$CSV"
ntotal=$(( $(wc -w <<< "$PROGS") * PASSES * $(wc -w <<< "$SIZES") * $(wc -w <<< "$THRESHOLDS") ))
echo "direct-read-sweep: $PROGS x $PASSES pass(es) x sizes ($SIZES) x thresholds ($THRESHOLDS) = $ntotal runs of $ITERS messages, CRC on; results in $OUT"
port=$((20000 + $$ % 20000))
failed=0
n=0
# run PROG PASS SIZE THRESHOLD: one perftest pair; its average MB/s into runs.csv
run() {
  local log=$OUT/logs/$1-p$2-s$3-t$4 spid bw crc src
  port=$((port + 1)); [ $port -gt 60000 ] && port=20000
  n=$((n + 1))
  timeout 120 "$RNIC" run --crc required --direct-min "$4" -- "$1" -R -F -d rnic0 -p "$port" \
    -s "$3" -n "$ITERS" > "$log.server.log" 2>&1 &
  spid=$!
  sleep 0.7
  timeout 120 "$RNIC" run --crc required --direct-min "$4" -- "$1" -R -F -d rnic0 -p "$port" \
    -s "$3" -n "$ITERS" 127.0.0.1 > "$log.client.log" 2>&1
  crc=$?
  for _ in $(seq 1 100); do kill -0 "$spid" 2> /dev/null || break; sleep 0.1; done
  kill "$spid" 2> /dev/null; wait "$spid"; src=$?
  # perftest's result line: #bytes #iterations BW-peak BW-average MsgRate
  bw=$(awk -v s="$3" '$1 == s && NF >= 5 { v = $4 } END { print v }' "$log.client.log")
  if [ $crc != 0 ] || [ $src != 0 ] || [ -z "$bw" ]; then
    echo "[$n/$ntotal] $1 -s $3 --direct-min $4: FAILED (client $crc, server $src; $log.*.log)"
    failed=1; return
  fi
  echo "$1,$2,$3,$4,$bw" >> "$CSV"
  echo "[$n/$ntotal] $1 pass $2: $3 octets, --direct-min $4: $bw MB/s"
}
for pass in $(seq 1 "$PASSES"); do
  for prog in $PROGS; do
    for size in $SIZES; do
      for t in $THRESHOLDS; do run "$prog" "$pass" "$size" "$t"; done
    done
  done
done

# median of the numbers on stdin ("-" for none)
median() { sort -g | awk '{ v[NR] = $1 } END { if (!NR) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
{
  for prog in $PROGS; do
    echo "$prog, CRC on, $ITERS messages a run, $PASSES pass(es): median MB/s (ratio to --direct-min 4096 of the same pass)"
    echo
    printf '| size |'; for t in $THRESHOLDS; do printf ' %s |' "$t"; done; echo
    printf '|---|'; for _ in $THRESHOLDS; do printf -- '---|'; done; echo
    for size in $SIZES; do
      printf '| %s |' "$size"
      for t in $THRESHOLDS; do
        mb=$(awk -F, -v p="$prog" -v s="$size" -v t="$t" '$1 == p && $3 == s && $4 == t { print $5 }' "$CSV" | median)
        ratio=$(awk -F, -v p="$prog" -v s="$size" -v t="$t" '
          $1 == p && $3 == s && $4 == 4096 { base[$2] = $5 }
          $1 == p && $3 == s && $4 == t { v[$2] = $5 }
          END { for (k in v) if (base[k] > 0) printf "%.3f\n", v[k] / base[k] }' "$CSV" | median)
        printf ' %s (%s) |' "$mb" "$ratio"
      done
      echo
    done
    echo
  done
  echo "$(date +%F), $(nproc) cores; scripts/direct-read-sweep.sh --passes $PASSES"
} | tee "$OUT/direct-reads.md"
exit $failed
