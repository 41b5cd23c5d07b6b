#!/usr/bin/env bash
# The placement benchmark's quick form, scripts/beyond-holes-bench.sh --quick (one condition, 2 %
# loss, one run of each arm) for one sender: rnic (ctest BeyondHolesBench.Quick, across
# impair.sh's link) or siw (the last step of ctest SiwInterop.RnicPingAgainstLinuxSiwInQemu:
# siw's rping in the VM on a TAP, netem in the guest). It runs, and its outputs exist and say
# what the arms are: a row per arm in runs.csv and table.md, `hold` placed nothing beyond a
# hole, `discard` opened no hole and dropped segments, every arm timed holes (real ones: the
# kernel queued segments out of order); with siw, whose FPDUs each start a segment, `place`
# placed FPDUs beyond holes. The plot is made where gnuplot is installed. Figures are not
# judged (a shared machine). Skipped (77) where the link cannot be made (no root, namespace, TAP,
# vde2; for siw no QEMU or image); a siw VM that does not boot on the TAP fails.
#   tests/beyond_holes_bench_smoke.sh RNIC OUT_DIR [rnic|siw]
set -uo pipefail
export RNIC=${1:?usage: beyond_holes_bench_smoke.sh RNIC OUT_DIR [rnic|siw]}
OUT=${2:?usage: beyond_holes_bench_smoke.sh RNIC OUT_DIR [rnic|siw]}
PEER=${3:-rnic}
case $PEER in rnic) cond="loss 2 %" ;; siw) cond="siw: loss 2 %" ;; *) echo "bad peer $PEER"; exit 2 ;; esac
HERE=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$OUT"
bash "$HERE/scripts/beyond-holes-bench.sh" --quick --peer "$PEER" --out "$OUT"; rc=$?
[ $rc = 77 ] && exit 77
fails=0
fail() { echo "FAILED: $*"; fails=1; }
[ $rc = 0 ] || fail "beyond-holes-bench.sh --quick --peer $PEER exited $rc"
CSV=$OUT/runs.csv
[ -s "$CSV" ] || { echo "FAILED: no $CSV"; exit 1; }
# row ARM: that arm's row of runs.csv
row() { awk -F, -v c="$cond" -v a="$1" 'NR > 1 && $1 == c && $2 == a' "$CSV"; }
col() { cut -d, -f"$2" <<< "$1"; }
for arm in place hold discard; do
  r=$(row $arm)
  [ -n "$r" ] || { fail "no row for $arm"; continue; }
  [ "$(col "$r" 12)" -gt 0 ] || fail "$arm timed no hole: $r"
  awk -v g="$(col "$r" 4)" 'BEGIN { exit !(g > 0) }' || fail "$arm: no goodput: $r"
  awk -v p="$(col "$r" 5)" 'BEGIN { exit !(p > 0) }' || fail "$arm: the kernel queued nothing out of order: $r"
  grep -q "| $cond | $arm | 1 |" "$OUT/table.md" || fail "table.md has no row for $arm"
done
r=$(row hold); [ -z "$r" ] || [ "$(col "$r" 8)" = 0 ] || fail "hold placed FPDUs beyond a hole: $r"
r=$(row discard)
[ -z "$r" ] || { [ "$(col "$r" 7)" = 0 ] && [ "$(col "$r" 9)" -gt 0 ] && [ "$(col "$r" 10)" = 0 ]; } ||
  fail "discard opened holes or dropped nothing: $r"
if [ "$PEER" = siw ]; then
  r=$(row place)
  [ -z "$r" ] || { [ "$(col "$r" 7)" -gt 0 ] && [ "$(col "$r" 8)" -gt 0 ]; } ||
    fail "place opened no hole or placed nothing beyond one from siw's segments: $r"
  r=$(row place)
  [ -z "$r" ] || [ "$(col "$r" 6)" -gt 0 ] || fail "siw's TCP retransmitted nothing: $r"
fi
if command -v gnuplot > /dev/null; then
  [ -s "$OUT/beyond-holes.png" ] || fail "no plot"
fi
[ $fails = 0 ] && echo "beyond-holes-bench --quick --peer $PEER passed"
exit $fails
