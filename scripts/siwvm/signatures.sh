# shellcheck shell=bash
# Signatures of siw's own failures, read from siw's wire (the guest's capture of one case: siw at
# 10.0.2.15, the host, i.e. us, at 10.0.2.2). Sourced by scripts/siw-interop.sh, which gives a
# case another attempt only when one of these confirms what the programs' logs said (see
# docs/siw-interop.md); tests/siw_signatures.sh checks them on committed captures.

# close_race_on_wire PCAP: siw's close race. True when siw's last Send is on its wire with the
# MSN of our last Send (the same close-handshake exchange), and after it comes our FIN (or RST)
# before any FIN or RST of siw's (an earlier RST of siw's, e.g. perftest's listen race, does not
# count).
close_race_on_wire() {
  timeout 60 tshark --disable-protocol rpcordma -r "$1" \
    -Y 'iwarp_rdma.opcode == 3 || tcp.flags.fin == 1 || tcp.flags.reset == 1' \
    -T fields -e ip.src -e iwarp_rdma.opcode -e iwarp_ddp.msn -e tcp.flags.fin -e tcp.flags.reset \
    2>/dev/null | awk -F'\t' '
      $1 == "10.0.2.15" && $2 == "0x03" { send = NR; siw_msn = $3; ours = 0; siw = 0 }
      $1 == "10.0.2.2" && $2 == "0x03" { our_msn = $3 }
      send && ($4 == 1 || $5 == 1) && $1 == "10.0.2.2" && !ours { ours = NR }
      send && ($4 == 1 || $5 == 1) && $1 == "10.0.2.15" && !siw { siw = NR }
      END { exit !(send && ours && siw_msn != "" && siw_msn == our_msn && (!siw || siw > ours)) }'
}

# siw_bad_crc_on_wire PCAP: siw sent an FPDU whose MPA CRC does not match its octets (tshark's
# own check, independent of our decoder).
siw_bad_crc_on_wire() {
  [ "$(timeout 60 tshark --disable-protocol rpcordma -r "$1" -V -Y 'iwarp_mpa && ip.src == 10.0.2.15' \
        2>/dev/null | grep -c 'Bad CRC32')" -gt 0 ]
}
