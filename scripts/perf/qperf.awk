# scripts/perf/qperf.awk - qperf's report ("TEST:" then "    bw  =  2.75 GB/sec" or
# "    latency  =  50.3 us") to one "TEST VALUE" line per test: bandwidth in MB/s (10^6 B/s,
# qperf's own unit), latency in microseconds.
$1 ~ /:$/ && NF == 1 { test = substr($1, 1, length($1) - 1); next }
test != "" && ($1 == "bw" || $1 == "latency") && $2 == "=" {
  v = $3; u = $4
  if (u == "GB/sec") v *= 1000; else if (u == "KB/sec") v /= 1000; else if (u == "bytes/sec") v /= 1e6
  else if (u == "ms") v *= 1000; else if (u == "sec") v *= 1e6; else if (u == "ns") v /= 1000
  print test, v
  test = ""
}
