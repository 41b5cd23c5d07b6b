#!/bin/bash
# ctest SiwSignatures.ReadSiwsOwnWire: scripts/siwvm/signatures.sh on captures of siw's wire and on
# a log of siw's rping kept from real interop runs (tests/golden/siw_signatures/), and on edits of
# them that must not match.
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
# skipped_fpdu.pcap: a4 of the ASan build's CI run on 2026-11-27 (our client, siw's rping server,
# 3 x 65535): siw's RDMA Write of the second ping lacks one FPDU; frames 220-221 are the FPDUs
# after the gap, which decode reports as DDP violations (R>I: siw was the responder), 228 our
# Terminate [DDP tagged: base or bounds violation].
S="$G/skipped_fpdu.pcap"
expect yes "siw's skipped FPDU on the wire of a run where it happened" siw_violation_on_wire "$S" R
expect no "the same capture read for siw as the initiator (our own FPDUs are clean)" siw_violation_on_wire "$S" I
editcap -F pcap -r "$S" "$T/before_gap.pcap" 1-219 2>/dev/null
expect no "the same connection before the FPDUs after the gap" siw_violation_on_wire "$T/before_gap.pcap" R
editcap -F pcap "$S" "$T/no_after.pcap" 220 221 2>/dev/null
expect no "without the FPDUs after the gap (a TCP gap, no FPDU of siw's breaks DDP)" siw_violation_on_wire "$T/no_after.pcap" R
expect no "a clean connection of siw's (the close race's)" siw_violation_on_wire "$G/close_race.pcap" R
expect no "a side that is neither I nor R" siw_violation_on_wire "$S" X
expect no "a capture that is not there" siw_violation_on_wire "$T/missing.pcap" R
# siw_no_terminate.pcap: e1 of the plain build's CI run on 2026-11-27 (siw's rping Reads our 4096
# octets into 64): frame 12 our Read Response, 14 siw's FIN with no Terminate before it.
# siw_terminate.pcap: e1 of an earlier run, as siw usually ends it: 12 its Terminate, 13 its FIN.
N="$G/siw_no_terminate.pcap"
expect yes "siw's close without its Terminate on the wire of a run where it happened" siw_closed_without_terminate "$N"
expect no "the same case where siw sent its Terminate before its FIN" siw_closed_without_terminate "$G/siw_terminate.pcap"
editcap "$N" "$T/no_fin.pcap" 14 2>/dev/null
expect no "the same connection without siw's FIN (siw did not close)" siw_closed_without_terminate "$T/no_fin.pcap"
editcap "$N" "$T/no_response.pcap" 12 2>/dev/null
expect no "without our Read Response (siw's error was never provoked)" siw_closed_without_terminate "$T/no_response.pcap"
editcap "$N" "$T/no_request.pcap" 10 2>/dev/null
expect no "without siw's Read Request (no iWARP decoded from siw)" siw_closed_without_terminate "$T/no_request.pcap"
expect no "a capture that is not there" siw_closed_without_terminate "$T/missing.pcap"
# rping_exit_race.log: siw's rping client of case c5 in the CI run of 2026-11-27 (50 pings of 1000
# octets, -V; our server had verified all 50), exit 255. rping's own exit race, rdma-core PR #1622.
L="$G/rping_exit_race.log"
expect yes "rping's exit race in the log of a run where it happened" rping_exit_race "$L" 255
expect no "the same log with exit status 1" rping_exit_race "$L" 1
expect no "the same log with exit status 0" rping_exit_race "$L" 0
{ echo 'server DISCONNECT EVENT...'; echo 'wait for RDMA_READ_ADV state 10'; tail -1 "$L"; } > "$T/server.log"
expect yes "rping's server lines before the same failure" rping_exit_race "$T/server.log" 255
{ echo 'cq completion failed status 5'; cat "$L"; } > "$T/completion.log"
expect no "a failed completion before it" rping_exit_race "$T/completion.log" 255
{ echo 'data mismatch!'; cat "$L"; } > "$T/mismatch.log"
expect no "a failed verification before it" rping_exit_race "$T/mismatch.log" 255
tail -1 "$L" > "$T/no_disconnect.log"
expect no "without the disconnect (the channel went before the run ended)" rping_exit_race "$T/no_disconnect.log" 255
{ cat "$L"; echo 'rping: something after'; } > "$T/not_last.log"
expect no "with the failure not the last line" rping_exit_race "$T/not_last.log" 255
expect no "a log that is not there" rping_exit_race "$T/missing.log" 255
# rping_client_cut: the same client log (a complete run) against one cut short.
expect no "a client that ran to the end" rping_client_cut "$L"
{ echo 'wait for RDMA_WRITE_ADV state 10'; cat "$L"; } > "$T/cut.log"
expect yes "a client whose connection ended in the middle of its run" rping_client_cut "$T/cut.log"
if [ "$fails" != 0 ]; then echo "$fails signature check(s) failed"; exit 1; fi
echo "all signature checks passed"
