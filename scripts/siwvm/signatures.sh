# shellcheck shell=bash
# Signatures of siw's own failures, read from siw's wire (the guest's capture of one case: siw at
# 10.0.2.15, the host, i.e. us, at 10.0.2.2). Sourced by scripts/siw-interop.sh, which gives a
# case another attempt only when one of these confirms what the programs' logs said (see
# docs/siw-interop.md); tests/siw_signatures.sh checks them on committed captures.

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
