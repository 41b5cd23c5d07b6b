# scripts/perf/summarize.awk - perf.sh's per-pass rows (raw.tsv) to one row per figure.
# Input (tab-separated): pass family test size metric value unit baseline ratio diff status log.
#   ratio: ours against the baseline of the SAME pass, oriented so that above 1 is better than
#   the baseline (bandwidth and rates: ours / baseline; latency: baseline / ours); diff: latency
#   minus the baseline's (us). "-" where it does not apply.
# Output: -v mode=csv gives results.csv; -v mode=md gives markdown tables, one per family, with
#   only the sizes listed in -v sizes (bytes, comma-separated) for the size sweeps.
# Every figure is the median over the passes that produced it; the ratio is the median of the
# per-pass ratios (not the ratio of the medians), so a pass disturbed by other work on the host
# moves both sides of its own ratio.
BEGIN { FS = "\t"; n_keys = 0 }

function median(list,    a, n, i, j, t) {
  n = split(list, a, " ")
  if (n == 0) return "-"
  for (i = 2; i <= n; i++) { t = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
  return n % 2 ? a[(n + 1) / 2] + 0 : (a[n / 2] + a[n / 2 + 1]) / 2
}
function human_size(s) {
  if (s == "-") return "-"
  if (s >= 1048576 && s % 1048576 == 0) return (s / 1048576) " MiB"
  if (s >= 1024 && s % 1024 == 0) return (s / 1024) " KiB"
  return s " B"
}
function fmt(v, unit) {
  if (v == "-") return "-"
  if (unit == "KiB" || unit == "MB/s" || unit == "us") return sprintf(v >= 100 ? "%.0f" : "%.1f", v) " " unit
  if (unit == "x") return sprintf("%.2fx", v)
  return sprintf("%.3g", v) " " unit
}
function fmt_ratio(v) { return v == "-" ? "-" : sprintf("%.2fx", v) }
function fmt_diff(v) { return v == "-" ? "-" : sprintf("%+.1f us", v) }

$1 == "pass" { next }  # header
{
  k = $2 SUBSEP $3 SUBSEP $4 SUBSEP $5
  if (!(k in seen)) { seen[k] = 1; keys[++n_keys] = k; unit[k] = $7 }
  total[k]++
  if ($11 == "ok") {
    ok[k]++
    vals[k] = vals[k] " " $6
    if ($8 != "-") base[k] = base[k] " " $8
    if ($9 != "-") rat[k] = rat[k] " " $9
    if ($10 != "-") dif[k] = dif[k] " " $10
  } else if (!(k in faillog)) faillog[k] = $12
}
END {
  split(sizes, sz, ","); for (i in sz) table_size[sz[i]] = 1
  title["tcp"] = "Raw TCP baseline: qperf tcp_bw / tcp_lat (one TCP connection on 127.0.0.1, no drop-in involved)"
  title["qperf"] = "qperf over the drop-in (rnic run -- qperf -cm1); baseline: qperf tcp_bw / tcp_lat, same size, same pass"
  title["perftest"] = "perftest over the drop-in (-R -F -d rnic0, -a sweep; table shows the swept sizes only); baseline: qperf tcp_bw / tcp_lat, same size, same pass"
  title["scale"] = "Scale: ib_write_bw -q N (N QPs between two processes, 64 KiB, fixed duration); baseline: qperf tcp_bw at 64 KiB, same pass"
  title["rnic_bench"] = "build/bench/rnic_bench (C++ verbs shim, not the drop-in); baseline: its own raw TCP, same run"
  title["enlarge"] = "rnic enlarge-bench, enlarge scheme (round-trip latency, one-way throughput); baseline: its own raw TCP, same run (the *_vs_rc_rdma_write_bw rows: qperf rc_rdma_write_bw, same size, same pass)"
  title["memory"] = "Memory (rnic enlarge-bench --part memory: N idle connections, one QP at each end, in two processes)"
  if (mode == "csv") {
    print "family,test,size_bytes,metric,unit,median,baseline_median,ratio_median,diff_median_us,passes_ok,passes_failed,failed_log"
    for (i = 1; i <= n_keys; i++) {
      k = keys[i]; split(k, f, SUBSEP)
      printf "%s,%s,%s,%s,%s,%s,%s,%s,%s,%d,%d,%s\n", f[1], f[2], f[3], f[4], unit[k], median(vals[k]),
             median(base[k]), median(rat[k]), median(dif[k]), ok[k], total[k] - ok[k], (k in faillog) ? faillog[k] : ""
    }
    exit
  }
  n_fam = split("tcp qperf perftest scale rnic_bench enlarge memory", fam, " ")
  for (j = 1; j <= n_fam; j++) {
    printed = 0
    for (i = 1; i <= n_keys; i++) {
      k = keys[i]; split(k, f, SUBSEP)
      if (f[1] != fam[j]) continue
      if ((f[1] == "perftest" || f[1] == "tcp") && f[3] != "-" && !(f[3] in table_size)) continue
      if (!printed) {
        printf "\n#### %s\n\n", title[fam[j]]
        print "| test | size | figure (median) | baseline (median) | ratio to baseline (median of passes; >1 better) | latency minus baseline | passes ok |"
        print "| --- | --- | --- | --- | --- | --- | --- |"
        printed = 1
      }
      figure = ok[k] ? fmt(median(vals[k]), unit[k]) : "FAILED"
      if (total[k] > ok[k]) figure = figure " (" (total[k] - ok[k]) " failed, log: `" faillog[k] "`)"
      printf "| %s | %s | %s | %s | %s | %s | %d/%d |\n", f[2], human_size(f[3]), figure,
             fmt(median(base[k]), unit[k]), fmt_ratio(median(rat[k])), fmt_diff(median(dif[k])), ok[k], total[k]
    }
  }
}
