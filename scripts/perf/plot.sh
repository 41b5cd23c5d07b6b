#!/usr/bin/env bash
# scripts/perf/plot.sh RESULTS_CSV OUT_DIR - perf.sh's PNG plots with gnuplot, one per family:
# OUT_DIR/qperf.png (qperf rc_* over the drop-in) and OUT_DIR/perftest.png (ib_write_bw,
# ib_send_lat, ib_read_lat over the drop-in), each with bandwidth against message size on the
# left and latency against size on the right, log-log, medians over the passes, raw TCP (qperf
# tcp_bw / tcp_lat at the same sizes, same passes) drawn dashed. A family with no data is skipped.
set -uo pipefail
csv=$1
out=$2
dat="$out/plot-data"
mkdir -p "$dat"

series() {  # series FAMILY TEST -> path of a "size median" file sorted by size (empty if none)
  local f="$dat/$1-$2.dat"
  awk -F, -v fam="$1" -v t="$2" '$1 == fam && $2 == t && $3 != "-" && $6 != "-" { print $3, $6 }' \
    "$csv" | sort -n > "$f"
  echo "$f"
}

panel() {  # panel TITLE YLABEL "FAMILY:TEST ..." -> gnuplot commands for one panel (or nothing)
  local title=$1 ylabel=$2 plots=() spec f
  for spec in $3; do
    f=$(series "${spec%%:*}" "${spec#*:}")
    [[ -s $f ]] || continue
    if [[ ${spec%%:*} == tcp ]]; then
      plots+=("'$f' using 1:2 with linespoints dashtype 2 lw 2 title 'raw TCP (${spec#*:})'")
    else
      plots+=("'$f' using 1:2 with linespoints lw 2 title '${spec#*:}'")
    fi
  done
  ((${#plots[@]})) || return 0
  local IFS=,
  printf "set title '%s'\nset ylabel '%s'\nplot %s\n" "$title" "$ylabel" "${plots[*]}"
}

plot_family() {  # plot_family NAME BW_SERIES LAT_SERIES
  local name=$1 bw lat
  bw=$(panel "$name: bandwidth (median)" "MB/s (10^6 B/s)" "$2")
  lat=$(panel "$name: latency (median)" "microseconds" "$3")
  [[ -n $bw || -n $lat ]] || { echo "perf.sh: no $name data to plot" >&2; return 0; }
  {
    echo "set terminal pngcairo size 1400,560 noenhanced"
    echo "set output '$out/$name.png'"
    echo "set logscale xy; set grid; set key top left; set xlabel 'message size (bytes)'"
    echo "set xtics ('8 B' 8, '64 B' 64, '512 B' 512, '4 KiB' 4096, '32 KiB' 32768, '256 KiB' 262144, '2 MiB' 2097152)"
    echo "set multiplot layout 1,2"
    echo "$bw"
    echo "$lat"
    echo "unset multiplot"
  } > "$dat/$name.gp"
  gnuplot "$dat/$name.gp" 2> "$dat/$name.gnuplot.log" ||
    echo "perf.sh: FAILED gnuplot for $name.png: see $dat/$name.gnuplot.log" >&2
}

plot_family qperf "qperf:rc_bw qperf:rc_rdma_write_bw qperf:rc_rdma_read_bw tcp:tcp_bw" \
  "qperf:rc_lat qperf:rc_rdma_write_lat qperf:rc_rdma_read_lat tcp:tcp_lat"
plot_family perftest "perftest:ib_write_bw tcp:tcp_bw" \
  "perftest:ib_send_lat perftest:ib_send_lat_busypoll perftest:ib_read_lat perftest:ib_read_lat_busypoll tcp:tcp_lat"
