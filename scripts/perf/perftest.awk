# scripts/perf/perftest.awk - perftest's result rows (after the "#bytes" header) to one
# "SIZE VALUE [RATE]" line per row. Bandwidth tests (-v kind=bw): BW average, converted from
# perftest's MB/sec (2^20 B/s, perftest_parameters.c format_factor 0x100000) to MB/s = 10^6 B/s
# as qperf reports, then the message rate in M msg/s. Latency tests (kind=lat): t_typical in us,
# perftest's median: on a shared 2-core host a spinning perftest is sometimes preempted for a
# whole 10 ms time slice, which moves t_avg by milliseconds while the median stays put.
/#bytes/ { on = 1; next }
on && $1 ~ /^[0-9]+$/ && NF >= 5 {
  if (kind == "bw") printf "%s %.2f %s\n", $1, $4 * 1.048576, $5
  else print $1, $5
}
