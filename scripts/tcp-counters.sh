# shellcheck shell=bash
# tcp_counters NS: the kernel's TCP counters in network namespace NS, as "retransmitted segments,
# segments queued out of order, segments received" (RetransSegs and InSegs of /proc/net/snmp,
# TCPOFOQueue of /proc/net/netstat): the kernel's own account that a link's holes were real.
# Sourced by scripts/impair.sh and scripts/beyond-holes-bench.sh.
tcp_counters() {
  ip netns exec "$1" awk '
    /^Tcp:/ && !th { for (i = 1; i <= NF; i++) h[i] = $i; th = 1; next }
    /^Tcp:/ { for (i = 1; i <= NF; i++) if (h[i] == "RetransSegs") r = $i; else if (h[i] == "InSegs") n = $i }
    /^TcpExt:/ && !eh { for (i = 1; i <= NF; i++) e[i] = $i; eh = 1; next }
    /^TcpExt:/ { for (i = 1; i <= NF; i++) if (e[i] == "TCPOFOQueue") o = $i }
    END { print r + 0, o + 0, n + 0 }' /proc/net/snmp /proc/net/netstat
}
