# shellcheck shell=bash
# Signatures of siw's own failures, read from siw's wire (the guest's capture of one case: siw at
# 10.0.2.15, the host, i.e. us, at 10.0.2.2), and of rping's own exit race, read from its log.
# Sourced by scripts/siw-interop.sh, which gives a case another attempt only when one of the wire
# signatures confirms what the programs' logs said, and passes an rping that exited 255 only on
# rping_exit_race (see docs/siw-interop.md); tests/siw_signatures.sh checks them on committed
# captures and logs.

# tshark as every check here runs it: heuristic dissectors (MPA's) before the ones registered
# for a port, else a connection whose ephemeral port Wireshark gives to another protocol (57000 is
# IRC's) shows no MPA frame at all (tests/test_generated_traces.cpp, GeneratedTracePorts).
TSHARK=(tshark -o tcp.try_heuristic_first:TRUE)

# close_race_on_wire PCAP: siw's close race. True when, on the connection of siw's last Send
# (the data-exchange connection of perftest -R), that Send carries the MSN of our last Send
# there (the same close-handshake exchange), our FIN on that connection comes after it, and
# before that FIN we neither closed nor reset that connection and siw sent no FIN or RST on it.
# (An RST of siw's on another connection, e.g. perftest's listen race, does not count.)
close_race_on_wire() {
  timeout 60 "${TSHARK[@]}" --disable-protocol rpcordma -r "$1" \
    -Y 'iwarp_rdma.opcode == 3 || tcp.flags.fin == 1 || tcp.flags.reset == 1' \
    -T fields -e tcp.stream -e ip.src -e iwarp_rdma.opcode -e iwarp_ddp.msn -e tcp.flags.fin \
    -e tcp.flags.reset 2>/dev/null | awk -F'\t' '
      { n++; st[n] = $1; src[n] = $2; op[n] = $3; msn[n] = $4; fin[n] = $5; rst[n] = $6 }
      src[n] == "10.0.2.15" && op[n] == "0x03" { send = n }
      END {
        if (!send) exit 1
        c = st[send]
        for (i = 1; i <= n; i++) {
          if (st[i] != c) continue
          if (src[i] == "10.0.2.2" && op[i] == "0x03") our_msn = msn[i]
          if (i < send && (fin[i] == 1 || rst[i] == 1)) exit 1  # the connection closed before it
          if (i > send && src[i] == "10.0.2.15" && (fin[i] == 1 || rst[i] == 1) && !ours) exit 1
          if (i > send && src[i] == "10.0.2.2" && rst[i] == 1 && !ours) exit 1
          if (i > send && src[i] == "10.0.2.2" && fin[i] == 1 && !ours) ours = i
        }
        exit !(ours && msn[send] != "" && msn[send] == our_msn)
      }'
}

# siw_bad_crc_on_wire PCAP: siw sent an FPDU whose MPA CRC does not match its octets (tshark's
# own check, independent of our decoder).
siw_bad_crc_on_wire() {
  [ "$(timeout 60 "${TSHARK[@]}" --disable-protocol rpcordma -r "$1" -V -Y 'iwarp_mpa && ip.src == 10.0.2.15' \
        2>/dev/null | grep -c 'Bad CRC32')" -gt 0 ]
}

# siw_closed_without_terminate PCAP: siw closed without the Terminate its error sends. True when
# siw's Read Request (RDMAP opcode 1) and then our Read Response (2) are on siw's own wire, and
# siw's FIN follows with no Terminate (7) of siw's before it and no FIN or RST of ours before it
# (so siw closed first, after our answer). In case e1 (siw's rping Reads our 4096 octets into 64)
# siw's kernel ends the QP with a Terminate [DDP tagged: base or bounds violation] and then
# closes; once in about sixty runs (the plain build's CI run of 2026-11-27) it closed without
# sending it. tshark lists the opcodes of the FPDUs one segment carries comma-separated.
siw_closed_without_terminate() {
  [ -s "$1" ] || return 1
  timeout 60 "${TSHARK[@]}" --disable-protocol rpcordma -r "$1" \
    -Y 'iwarp_rdma || tcp.flags.fin == 1 || tcp.flags.reset == 1' \
    -T fields -e ip.src -e iwarp_rdma.opcode -e tcp.flags.fin -e tcp.flags.reset 2>/dev/null |
    awk -F'\t' '
      function has(list, op) { return list ~ ("(^|,)" op "(,|$)") }
      function set(flag) { return flag == "1" || flag == "True" }
      siw_fin { next }
      $1 == "10.0.2.15" && has($2, "0x01") { request = 1 }
      $1 == "10.0.2.2" && has($2, "0x02") && request { response = 1 }
      $1 == "10.0.2.15" && has($2, "0x07") { term = 1 }
      $1 == "10.0.2.2" && (set($3) || set($4)) { ours_first = 1 }
      $1 == "10.0.2.15" && set($3) { siw_fin = 1 }
      END { exit !(request && response && siw_fin && !term && !ours_first) }'
}

# siw_violation_on_wire PCAP SIDE: an FPDU siw sent breaks DDP on siw's own wire (`rnic decode`
# reports a VIOLATION on it): seen once as an RDMA Write missing one FPDU (a4, CI 2026-11-27: the
# next FPDU's TO skips 1436 octets while TCP's sequence numbers run on). SIDE is siw's end of the
# connection in decode's terms: R when we initiated (siw the responder), I when siw did. Needs
# RNIC (default build/rnic).
siw_violation_on_wire() {
  local other
  case "$2" in R) other=I ;; I) other=R ;; *) return 1 ;; esac
  [ -s "$1" ] || return 1
  local d  # decode exits 1 on a violation: its output, not its status
  d=$(timeout 60 "${RNIC:-$(dirname "${BASH_SOURCE[0]}")/../../build/rnic}" decode "$1" 2>/dev/null)
  grep -qE " c[0-9]+ $2>$other @[0-9]+ +VIOLATION " <<< "$d"
}

# rping_exit_race LOG RC: rping's own exit race, not siw's and not ours (rdma-core pull request
# #1622, 2025; Debian 12's rdma-core 44 predates it). rping's CM thread loops on rdma_get_cm_event
# with no way to stop; when main destroys the event channel after the last event but before that
# thread is back in the call, the call fails and rping exits 255 after a complete run. True when
# RC is 255, the log's last line is that failure, rping saw the disconnect, and every other line is
# one rping prints on a clean run (with -V, a failed verification or completion would print more).
rping_exit_race() {
  local -a lines; local i n
  [ "$2" = 255 ] && [ -f "$1" ] || return 1
  mapfile -t lines < <(grep -v '^[[:space:]]*$' "$1")
  n=${#lines[@]}
  [ "$n" -ge 2 ] && [ "${lines[n - 1]}" = "rdma_get_cm_event: Bad file descriptor" ] || return 1
  grep -qE '^(client|server) DISCONNECT EVENT\.\.\.$' "$1" || return 1
  for ((i = 0; i < n - 1; i++)); do
    [[ "${lines[i]}" =~ ^((client|server)\ DISCONNECT\ EVENT\.\.\.|wait\ for\ RDMA_READ_ADV\ state\ 10)$ ]] || return 1
  done
}

# rping_client_cut LOG: an rping client stopped before its last ping. rping's client exits 0
# whenever the connection ends, even in the middle of its run, and its only trace is the wait it
# was in ("wait for RDMA_WRITE_ADV state 10"); a client that ran to the end prints no such line.
# (A server always ends in "wait for RDMA_READ_ADV state 10", so this is for clients' logs only.)
rping_client_cut() {
  grep -qE '^wait for RDMA_[A-Z_]+ state [0-9]+' "$1" 2>/dev/null
}
