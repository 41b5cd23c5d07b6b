#!/bin/bash
# ctest SiwSignatures.ReadSiwsOwnWire: scripts/siwvm/signatures.sh on captures of siw's wire kept
# from real interop runs (tests/golden/siw_signatures/), and on edits of them that must not match.
set -uo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$SRC/scripts/siwvm/signatures.sh"
G="$SRC/tests/golden/siw_signatures"
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fails=0
expect() {  # expect yes|no DESCRIPTION COMMAND...
  local want="$1" what="$2"; shift 2
  if "$@"; then got=yes; else got=no; fi
  if [ "$got" = "$want" ]; then echo "ok: $what"; else echo "FAILED: $what (got $got, want $want)"; fails=$((fails + 1)); fi
}
if ! command -v tshark >/dev/null || ! command -v editcap >/dev/null; then
  echo "FAILED: tshark and editcap are needed (apt-get install tshark)"; exit 1
fi
# close_race.pcap: p1 of a run on 2026-11-26 (siw's ib_write_bw server, ours the client): frame 46
# is siw's close-handshake Send (MSN 16), 47 our FIN on the test QP's connection, 48 ours on the
# Send's (the data exchange), 49 and 50 siw's; 23 is an RST of siw's
# (perftest's listen race, an earlier connection attempt).
expect yes "siw's close race on the wire of a run where it happened" close_race_on_wire "$G/close_race.pcap"
editcap "$G/close_race.pcap" "$T/no_last_send.pcap" 46 2>/dev/null
expect no "without siw's close-handshake Send (its last Send then has MSN 15, ours 16)" close_race_on_wire "$T/no_last_send.pcap"
editcap "$G/close_race.pcap" "$T/siw_first.pcap" 47 48 2>/dev/null
expect no "without our FINs (siw closed first)" close_race_on_wire "$T/siw_first.pcap"
editcap "$G/close_race.pcap" "$T/other_fin_only.pcap" 48 2>/dev/null
expect no "with our FIN only on the other connection (47), none on the Send's (48 removed)" close_race_on_wire "$T/other_fin_only.pcap"
editcap "$G/close_race.pcap" "$T/no_rst.pcap" 23 2>/dev/null
expect yes "the same without siw's earlier RST (perftest's listen race)" close_race_on_wire "$T/no_rst.pcap"
expect no "a capture that is not there" close_race_on_wire "$T/missing.pcap"
# bad_crc.pcap: p3 of a run on 2026-11-26 (siw's client, CRC on): frame 128's CRC is bad, 133 is
# our Terminate [MPA: CRC mismatch].
expect yes "siw's bad CRC on the wire of a run where it happened" siw_bad_crc_on_wire "$G/bad_crc.pcap"
expect no "no bad CRC on the close race's wire" siw_bad_crc_on_wire "$G/close_race.pcap"
editcap -r "$G/bad_crc.pcap" "$T/good.pcap" 1-127 2>/dev/null
expect no "the same connection before the bad FPDU" siw_bad_crc_on_wire "$T/good.pcap"
if [ "$fails" != 0 ]; then echo "$fails signature check(s) failed"; exit 1; fi
echo "all signature checks passed"
