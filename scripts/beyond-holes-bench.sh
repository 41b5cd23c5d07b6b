#!/usr/bin/env bash
# The placement benchmark (docs/beyond-holes.md): what placing data beyond real TCP holes buys,
# against holding it until the hole closes and against discarding it. Two rnic xfer processes
# across scripts/impair.sh's link (two network namespaces, VDE's wirefilter), both in the
# real-segment mode (--real-segments tap0), the client Writing 16 x 1 MiB --loop times into the
# server; per condition, arm and run:
#   goodput      the client's, to the server's memory (a Read after the last Write fences it)
#   holes        the server's segment path: holes opened, FPDUs placed beyond one, segments
#                dropped; the kernel's own account (TCP segments queued out of order and
#                retransmitted) says the holes were real
#   peak held    the most octets the server's segment receiver held for reassembly
#   copies       octets copied into reassembly storage per octet received
#   hole time    each hole, from closing to the octets beyond it delivered (--hole-times):
#                p50/p99 pooled over the runs, overall and by octets beyond the hole
#
#   scripts/beyond-holes-bench.sh [--loss "0.5 1 2 5"] [--jitter "0.2 0.5 1"] [--runs 3]
#                                 [--loop 4] [--arms "place hold discard"] [--markers off|required]
#                                 [--out DIR] [--quick]
#
# Conditions: each --loss PCT (1 ms delay, frames kept in order) and each --jitter MS (1 +- MS
# ms delay, frames may overtake each other: reordering, no loss). wirefilter takes no seed:
# each run is a fresh random draw (--runs of them). --quick: one condition (2 % loss), one run,
# --loop 1 (what ctest BeyondHolesBench.Quick runs). --markers required: MPA markers both ways
# (RFC 5044 §5), by which the segment path finds FPDUs beyond a hole wherever TCP cut the
# stream; without them it needs segments that start with an FPDU. Needs what impair.sh needs
# (root, vde2); exit 77 when the link cannot be made, 2 for a bad option, 1 when a run failed.
# Writes DIR/runs.csv (one row per run), DIR/holes/*.csv (every hole timed), DIR/table.md (the
# table docs/beyond-holes.md shows) and DIR/beyond-holes.png (gnuplot; skipped without it).
# Env: RNIC (default build/rnic).
set -uo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
RNIC=${RNIC:-$HERE/build/rnic}
LOSSES="0.5 1 2 5"
JITTERS="0.2 0.5 1"
RUNS=3
LOOP=4
ARMS="place hold discard"
MARKERS=off
OUT=$HERE/bench-out/beyond-holes
die() { echo "beyond-holes-bench: $*" >&2; exit 2; }
num_list() {  # NAME VALUE: VALUE is numbers separated by blanks
  [[ $2 =~ ^[[:space:]]*([0-9]+(\.[0-9]+)?[[:space:]]*)*$ ]] || die "$1 \"$2\": not a list of numbers"
}
while [ $# -gt 0 ]; do
  case $1 in
    --loss) [ $# -ge 2 ] || die "--loss needs a value"; num_list --loss "$2"; LOSSES=$2; shift 2 ;;
    --jitter) [ $# -ge 2 ] || die "--jitter needs a value"; num_list --jitter "$2"; JITTERS=$2; shift 2 ;;
    --runs) [[ ${2:-} =~ ^[1-9][0-9]?$ ]] || die "--runs ${2:-}: not 1..99"; RUNS=$2; shift 2 ;;
    --loop) [[ ${2:-} =~ ^[1-9][0-9]{0,2}$ ]] || die "--loop ${2:-}: not 1..999"; LOOP=$2; shift 2 ;;
    --arms)
      [ $# -ge 2 ] || die "--arms needs a value"
      for a in $2; do case $a in place|hold|discard) ;; *) die "--arms: unknown arm $a (place, hold, discard)" ;; esac; done
      ARMS=$2; shift 2 ;;
    --markers)
      case ${2:-} in off|required) MARKERS=$2 ;; *) die "--markers ${2:-}: not off or required" ;; esac
      shift 2 ;;
    --out) [ $# -ge 2 ] || die "--out needs a value"; OUT=$2; shift 2 ;;
    --quick) LOSSES=2; JITTERS=""; RUNS=1; LOOP=1; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
[ -x "$RNIC" ] || die "no $RNIC (build first, or set RNIC)"
mkdir -p "$OUT/holes" || die "cannot make $OUT"
rm -f "$OUT"/holes/*.csv
CSV=$OUT/runs.csv
echo "condition,arm,run,goodput_MBps,kernel_ooo_pct,retransmitted,holes_opened,placed_beyond,dropped,peak_held,copied_per_octet,holes_timed,octets_beyond,p50_us,p99_us" > "$CSV"

conditions=()
for l in $LOSSES; do conditions+=("loss $l %|--loss $l --delay 1"); done
for j in $JITTERS; do conditions+=("reorder 1+-$j ms|--delay 1 --jitter $j --reorder"); done
total=$(( ${#conditions[@]} * $(wc -w <<< "$ARMS") * RUNS ))
echo "beyond-holes-bench: ${#conditions[@]} condition(s) x arms ($ARMS) x $RUNS run(s) = $total runs of $((16 * LOOP)) MiB each; results in $OUT"

# val TEXT REGEX: the first number matched by REGEX (a sed -E group) in TEXT, "" when absent.
val() { sed -nE "s#.*$2.*#\\1#p" <<< "$1" | head -1; }
failed=0
n=0
XFER="xfer --sizes 1048576 --ops write --timeout 60000 --real-segments tap0 --markers $MARKERS"
for cond in "${conditions[@]}"; do
  name=${cond%%|*}; link=${cond#*|}
  tag=$(tr -c 'a-zA-Z0-9.\n' '_' <<< "$name")
  for arm in $ARMS; do
    for run in $(seq 1 "$RUNS"); do
      n=$((n + 1))
      holes=$OUT/holes/$tag-$arm-$run.csv
      # shellcheck disable=SC2086  # $link is a list of options
      out=$(bash "$HERE/scripts/impair.sh" --timeout 300 $link \
        --server-cmd "'$RNIC' $XFER --beyond-holes $arm --hole-times $holes --server --bind \$PEER" \
        --client-cmd "'$RNIC' $XFER --beyond-holes $arm --loop $LOOP --client \$PEER" 2>&1)
      rc=$?
      [ $rc = 77 ] && { echo "$out" | tail -3; exit 77; }
      good=$(val "$out" 'client: write loop: .* ([0-9.]+) MB/s goodput')
      path=$(grep 'server: segment path' <<< "$out")
      arms=$(grep 'server: beyond holes' <<< "$out")
      tcp=$(grep 'impair: TCP' <<< "$out")
      if [ $rc != 0 ] || [ -z "$good" ] || [ -z "$path" ] || [ -z "$arms" ] || [ ! -s "$holes" ]; then
        echo "[$n/$total] $name, $arm, run $run: FAILED (exit $rc)"; echo "$out" | tail -15 | sed 's/^/    /'
        failed=1; continue
      fi
      sin=$(val "$tcp" '\(server\): ([0-9]+) in'); sooo=$(val "$tcp" '\(server\): [0-9]+ in, [0-9]+ retransmitted, ([0-9]+) queued')
      cre=$(val "$tcp" '\(client\): [0-9]+ segments in, ([0-9]+) retransmitted')
      ooo_pct=$(awk -v o="$sooo" -v i="$sin" 'BEGIN { printf "%.1f", i ? 100 * o / i : 0 }')
      opened=$(val "$path" ' ([0-9]+) holes opened'); placed=$(val "$path" ' ([0-9]+) FPDUs placed')
      dropped=$(val "$arms" ' ([0-9]+) segments dropped'); peak=$(val "$arms" 'peak ([0-9]+) octets')
      copies=$(val "$arms" '\(([0-9.]+) per octet received\)')
      timed=$(val "$arms" ': ([0-9]+) holes \('); beyond=$(val "$arms" 'holes \(([0-9]+) octets beyond')
      p50=$(val "$arms" 'p50 ([0-9.]+) us'); p99=$(val "$arms" 'p99 ([0-9.]+) us')
      echo "$name,$arm,$run,$good,$ooo_pct,$cre,$opened,$placed,$dropped,$peak,$copies,$timed,$beyond,$p50,$p99" >> "$CSV"
      echo "[$n/$total] $name, $arm, run $run: $good MB/s; kernel: ${ooo_pct} % of segments queued out of order, $cre retransmitted; holes opened $opened, FPDUs placed beyond $placed, dropped $dropped; peak held $peak; hole closed -> delivered p50 $p50 us, p99 $p99 us over $timed holes"
    done
  done
done
[ "$(wc -l < "$CSV")" -gt 1 ] || { echo "beyond-holes-bench: no run succeeded"; exit 1; }

# The table: per condition and arm, medians over the runs; hole times pooled over the runs.
# pooled COND_TAG ARM: "count p50 p99" of every hole timed in those runs (microseconds).
pooled() {
  cat "$OUT"/holes/"$1"-"$2"-*.csv 2>/dev/null | grep -v '^octets' | cut -d, -f2 | sort -n |
    awk '{ v[NR] = $1 } END {
      if (!NR) { print 0, "-", "-"; exit }
      r50 = int(0.50 * NR + 0.999999); r99 = int(0.99 * NR + 0.999999)
      printf "%d %.1f %.1f\n", NR, v[r50] / 1000, v[r99] / 1000 }'
}
median_col() {  # COND ARM COLUMN: the median of a column of runs.csv over the runs
  awk -F, -v c="$1" -v a="$2" -v k="$3" 'NR > 1 && $1 == c && $2 == a { print $k }' "$CSV" | sort -g |
    awk '{ v[NR] = $1 } END { if (!NR) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
{
  echo "| condition | arm | runs | goodput MB/s | segments the kernel queued out of order, % | holes opened | FPDUs placed beyond | peak held KB | copies into reassembly per octet | holes timed | hole closed -> delivered p50 µs | p99 µs |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
  for cond in "${conditions[@]}"; do
    name=${cond%%|*}; tag=$(tr -c 'a-zA-Z0-9.\n' '_' <<< "$name")
    for arm in $ARMS; do
      runs=$(awk -F, -v c="$name" -v a="$arm" 'NR > 1 && $1 == c && $2 == a' "$CSV" | wc -l)
      [ "$runs" -gt 0 ] || continue
      peak=$(median_col "$name" "$arm" 10)
      read -r cnt p50 p99 < <(pooled "$tag" "$arm")
      printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$name" "$arm" "$runs" \
        "$(median_col "$name" "$arm" 4)" "$(median_col "$name" "$arm" 5)" "$(median_col "$name" "$arm" 7)" \
        "$(median_col "$name" "$arm" 8)" "$(awk -v p="$peak" 'BEGIN { printf "%.0f", p / 1024 }')" \
        "$(median_col "$name" "$arm" 11)" "$cnt" "$p50" "$p99"
    done
  done
  echo
  echo "Medians over the runs; hole times pooled over every hole of the runs. $(date -u +%Y-%m-%d), $(nproc) cores, $((16 * LOOP)) MiB of 1 MiB Writes per run, markers $MARKERS."
} > "$OUT/table.md"
cat "$OUT/table.md"

# The plot: hole closed -> delivered (p50 and p99, pooled over every condition and run) against
# the octets beyond the hole, by powers of two; and each arm's goodput per condition.
if command -v gnuplot > /dev/null; then
  for arm in $ARMS; do
    cat "$OUT"/holes/*-"$arm"-*.csv 2>/dev/null | grep -v '^octets' |
      awk -F, '$1 > 0 { b = int(log($1) / log(2)); print b, $2 }' | sort -k1,1n -k2,2n |
      awk '{ k[NR] = $1; v[NR] = $2 } END {
        i = 1
        while (i <= NR) {
          j = i; while (j < NR && k[j + 1] == k[i]) j++
          m = j - i + 1
          if (m >= 5) printf "%d %.1f %.1f %d\n", 2 ^ k[i], v[i + int(0.50 * m + 0.999999) - 1] / 1000,
                             v[i + int(0.99 * m + 0.999999) - 1] / 1000, m
          i = j + 1
        }
      }' > "$OUT/buckets-$arm.dat"
  done
  awk -F, 'NR > 1 { print }' "$CSV" > "$OUT/runs.dat"
  {
    echo "set terminal pngcairo size 1400,560 font ',10'"
    echo "set output '$OUT/beyond-holes.png'"
    echo "set multiplot layout 1,2 title 'Data beyond real TCP holes: place, hold or discard (rnic xfer --real-segments, scripts/impair.sh)'"
    echo "set logscale xy; set grid; set key top left"
    echo "set xlabel 'octets beyond the hole when it closed (bucket: at least)'; set ylabel 'hole closed -> octets beyond delivered, µs'"
    echo "set title 'p50 (solid) and p99 (dashed), holes pooled over conditions and runs'"
    plot="plot"
    c=1
    for arm in $ARMS; do
      [ -s "$OUT/buckets-$arm.dat" ] || continue
      plot+=" '$OUT/buckets-$arm.dat' using 1:2 with linespoints lc $c dt 1 title '$arm p50', '' using 1:3 with linespoints lc $c dt 2 title '$arm p99',"
      c=$((c + 1))
    done
    [ "$plot" = plot ] && plot="plot 1 title 'no holes timed'"
    echo "${plot%,}"
    echo "unset logscale; set logscale y 10; set grid; set key top right; set style data histograms"
    echo "set style histogram clustered; set style fill solid 0.7; set boxwidth 0.9"
    echo "set xlabel 'condition'; set ylabel 'goodput MB/s (median over runs)'; set title 'goodput'; set xtics rotate by -20"
    echo "unset logscale y; set yrange [0:*]"
    # one column per arm: the medians
    for arm in $ARMS; do
      for cond in "${conditions[@]}"; do
        name=${cond%%|*}; echo "\"$name\" $(median_col "$name" "$arm" 4)"
      done > "$OUT/goodput-$arm.dat"
    done
    plot="plot"
    for arm in $ARMS; do plot+=" '$OUT/goodput-$arm.dat' using 2:xtic(1) title '$arm',"; done
    echo "${plot%,}"
    echo "unset multiplot"
  } > "$OUT/plot.gp"
  if gnuplot "$OUT/plot.gp" 2> "$OUT/gnuplot.err"; then
    echo "plot: $OUT/beyond-holes.png"
  else
    echo "beyond-holes-bench: gnuplot failed: $(head -3 "$OUT/gnuplot.err")"; failed=1
  fi
else
  echo "plot: not made: gnuplot is not installed (apt-get install gnuplot-nox)"
fi
exit $failed
