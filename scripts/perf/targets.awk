# scripts/perf/targets.awk - issue 15's targets against perf.sh's results.csv: one markdown row
# per target and figure, with the measured value or ratio and whether the target is met. A
# figure this run did not produce (family not run, size not swept, every pass failed) says so.
BEGIN { FS = "," }
NR == 1 { next }
{ k = $1 SUBSEP $2 SUBSEP $3; med[k] = $6; rat[k] = $8; dif[k] = $9 }

function row(target, what, value, met) { printf "| %s | %s | %s | %s |\n", target, what, value, met }
function have(f, t, s) { return ((f SUBSEP t SUBSEP s) in med) && med[f SUBSEP t SUBSEP s] != "-" }
function ratio_target(target, f, t, s, label, min,    r) {
  if (!have(f, t, s) || rat[f SUBSEP t SUBSEP s] == "-") { row(target, label, "not measured in this run", "-"); return }
  r = rat[f SUBSEP t SUBSEP s] + 0
  row(target, label, sprintf("%.2fx", r), r >= min ? "met" : sprintf("missed (%.0f%% short)", 100 * (min - r) / min))
}
# A 64-byte message rate recorded as perftest test `t`, against 3 M msg/s.
function rate_target(target, t, label,    v) {
  if (!have("perftest", t, 64)) { row(target, label, "not measured in this run", "-"); return }
  v = med["perftest" SUBSEP t SUBSEP 64] + 0
  row(target, label, sprintf("%.3f M msg/s (%.2fx qperf tcp_bw's 64 B send() rate)", v, rat["perftest" SUBSEP t SUBSEP 64]),
      v >= 3 ? "met" : v > 0 ? sprintf("missed (%.1fx short)", 3 / v) : "missed")
}
# The round-trip excess over raw TCP: perftest's and qperf's latencies are half a round trip, so
# the round trip exceeds TCP's by twice the one-way difference.
function rtt_target(target, f, t, s, label, max,    d) {
  if (!have(f, t, s) || dif[f SUBSEP t SUBSEP s] == "-") { row(target, label, "not measured in this run", "-"); return }
  d = 2 * dif[f SUBSEP t SUBSEP s]
  row(target, label, sprintf("%+.1f us round trip", d), d <= max ? "met" : sprintf("missed by %.1f us", d - max))
}
END {
  print "| target (issue 15) | figure | measured | met? |"
  print "| --- | --- | --- | --- |"
  t1 = "64 KiB and 1 MiB RDMA Write and Send bandwidth, CRC on: >= 0.95x raw TCP"
  ratio_target(t1, "qperf", "rc_rdma_write_bw", 65536, "qperf rc_rdma_write_bw 64 KiB", 0.95)
  ratio_target(t1, "qperf", "rc_rdma_write_bw", 1048576, "qperf rc_rdma_write_bw 1 MiB", 0.95)
  ratio_target(t1, "qperf", "rc_bw", 65536, "qperf rc_bw (Send) 64 KiB", 0.95)
  ratio_target(t1, "qperf", "rc_bw", 1048576, "qperf rc_bw (Send) 1 MiB", 0.95)
  ratio_target(t1, "perftest", "ib_write_bw", 65536, "ib_write_bw 64 KiB", 0.95)
  ratio_target(t1, "perftest", "ib_write_bw", 1048576, "ib_write_bw 1 MiB", 0.95)
  t2 = "8-byte round trip <= raw TCP + 2 us polling, + 4 us blocking"
  rtt_target(t2, "perftest", "ib_send_lat", 8, "ib_send_lat 8 B (busy-polls its CQ; the engine thread receives) vs tcp_lat", 2)
  rtt_target(t2, "perftest", "ib_send_lat_busypoll", 8, "ib_send_lat 8 B under rnic run --busy-poll (the polling thread receives) vs tcp_lat (which blocks in read())", 2)
  rtt_target(t2, "qperf", "rc_lat", 8, "qperf rc_lat 8 B (waits on the completion channel) vs tcp_lat", 4)
  t3 = "64-byte RDMA Write rate >= 3 M msg/s with a deep send queue"
  rate_target(t3, "ib_write_rate", "ib_write_bw 64 B (tx depth 128), M msg/s")
  rate_target(t3, "ib_write_rate_busypoll", "ib_write_bw 64 B under rnic run --busy-poll (posts batched by the poll), M msg/s")
  row(t3, ">= 0.4x raw TCP writev batching", "not measured by perf.sh (no writev-batching TCP baseline here)", "-")
  t4 = "Enlargement: >= 0.9x plain RDMA Write bandwidth at >= 64 KiB"
  ratio_target(t4, "enlarge", "enlarge_throughput_vs_rc_rdma_write_bw", 65536, "enlarge-bench throughput / qperf rc_rdma_write_bw, 64 KiB", 0.9)
  ratio_target(t4, "enlarge", "enlarge_throughput_vs_rc_rdma_write_bw", 262144, "same, 256 KiB", 0.9)
  ratio_target(t4, "enlarge", "enlarge_throughput_vs_rc_rdma_write_bw", 1048576, "same, 1 MiB", 0.9)
  ratio_target("Enlargement: >= 0.5x raw TCP message rate at 64 B", "enlarge", "enlarge_throughput", 64,
               "enlarge-bench one-way throughput 64 B vs its raw TCP", 0.5)
  t6 = "Enlargement: idle connection still <= 8 KiB registered"
  if (have("memory", "registered_per_connection_N64", "-")) {
    v = med["memory" SUBSEP "registered_per_connection_N64" SUBSEP "-"] + 0
    row(t6, "registered per idle connection (server side), 64 connections", sprintf("%.2f KiB", v), v <= 8 ? "met" : sprintf("missed by %.2f KiB", v - 8))
  } else row(t6, "registered per idle connection", "not measured in this run", "-")
  row("Replay >= 500 MB/s of capture", "rnic replay", "not measured by perf.sh", "-")
}
