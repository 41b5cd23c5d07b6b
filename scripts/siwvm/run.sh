#!/bin/bash
# scripts/siwvm/run.sh SCENARIO [VAR=VALUE ...] - boot the siw VM once, run one guest scenario, power off.
#
# The guest scenario is scripts/siwvm/scenarios/SCENARIO.sh (busybox sh). It reaches the results
# folder through a 9p share: the guest writes into $OUT (= RESULTS/out on the host). VAR=VALUE
# pairs become environment variables of the scenario (RESULTS/env.sh).
# Env:
#   SIWVM_CACHE    image folder made by build.sh (default <source>/build/siwvm)
#   SIWVM_RESULTS  results folder (default $SIWVM_CACHE/results/SCENARIO-<time>)
#   SIWVM_HOSTFWD  comma list of slirp host forwards, e.g. "tcp:127.0.0.1:17174-:7174"
#   SIWVM_TAP      the VM's link is this TAP device instead of slirp (it must exist where QEMU
#                  runs, e.g. in a namespace the caller made, with 10.0.2.2/24 on it: the guest
#                  keeps 10.0.2.15 and its route through 10.0.2.2). No virtio offloads
#                  (vnet_hdr=off): the guest sends MTU-sized segments, each one a frame that netem
#                  can drop and the host's AF_PACKET reader sees. SIWVM_HOSTFWD is then ignored.
#   SIWVM_ACCEL    auto (default: KVM when /dev/kvm really runs a guest, else TCG) | tcg | kvm
#   SIWVM_TIMEOUT  limit for the whole VM run in seconds (default 240)
#   SIWVM_MEM / SIWVM_SMP  memory in MiB (default 768) / vCPUs (default 2)
# Exit status: the scenario's exit status (from RESULTS/out/scenario.rc); 124 when the VM timed
# out; 125 when the VM did not get as far as running the scenario; 143 when this script was
# stopped by a signal (the VM is stopped with it).
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$(cd "$HERE/../.." && pwd)"
SCEN="${1:?usage: run.sh SCENARIO [VAR=VALUE ...]}"; shift
CACHE="${SIWVM_CACHE:-$SRC/build/siwvm}"
[ -s "$CACHE/vmlinuz" ] && [ -s "$CACHE/initramfs.cpio.gz" ] || { echo "run.sh: no image in $CACHE (run scripts/siwvm/build.sh)" >&2; exit 125; }
[ -f "$HERE/scenarios/$SCEN.sh" ] || { echo "run.sh: no scenario $HERE/scenarios/$SCEN.sh" >&2; exit 125; }
RES="${SIWVM_RESULTS:-$CACHE/results/$SCEN-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$RES/out"; RES="$(cd "$RES" && pwd)"
rm -rf "$RES/scenarios" "$RES/out/scenario.rc"; cp -r "$HERE/scenarios" "$RES/scenarios"
: > "$RES/env.sh"
for kv in "$@"; do
  case "$kv" in *=*) printf 'export %s=%q\n' "${kv%%=*}" "${kv#*=}" >> "$RES/env.sh" ;; esac
done

# KVM only when it really runs a guest here (nested virtualization often initialises and then
# crawls or aborts); the probe boots nothing, so a KVM that passes it is still tried with a bound.
ACCEL="${SIWVM_ACCEL:-auto}"
if [ "$ACCEL" = auto ]; then
  ACCEL=tcg
  if [ -w /dev/kvm ] && grep -qE 'vmx|svm' /proc/cpuinfo \
     && echo quit | timeout 10 qemu-system-x86_64 -accel kvm -M none -nodefaults -display none -monitor stdio >/dev/null 2>&1; then
    ACCEL=kvm
  fi
fi
if [ "$ACCEL" = kvm ]; then ACC=(-accel kvm -cpu host,-arch-capabilities); else ACC=(-accel tcg,thread=multi -cpu max); fi

if [ -n "${SIWVM_TAP:-}" ]; then
  [ -e "/sys/class/net/$SIWVM_TAP" ] || { echo "run.sh: SIWVM_TAP: no device $SIWVM_TAP here" >&2; exit 125; }
  NET="tap,id=n0,ifname=$SIWVM_TAP,script=no,downscript=no,vnet_hdr=off"
else
  NET="user,id=n0"
  IFS=',' read -r -a FWDS <<< "${SIWVM_HOSTFWD:-}"
  for f in "${FWDS[@]}"; do [ -n "$f" ] && NET="$NET,hostfwd=$f"; done
fi
QEMU=(qemu-system-x86_64 "${ACC[@]}" -M pc -smp "${SIWVM_SMP:-2}" -m "${SIWVM_MEM:-768}"
      -nographic -no-reboot -nodefaults -serial stdio
      -kernel "$CACHE/vmlinuz" -initrd "$CACHE/initramfs.cpio.gz"
      -append "console=ttyS0 quiet loglevel=${SIWVM_LOGLEVEL:-4} panic=-1 cryptomgr.notests=1 siwvm.scenario=$SCEN"
      -netdev "$NET" -device virtio-net-pci,netdev=n0
      -fsdev "local,id=fs0,path=$RES,security_model=none"
      -device virtio-9p-pci,fsdev=fs0,mount_tag=hostshare)
printf '%q ' "${QEMU[@]}" > "$RES/qemu-cmdline.txt"
T0=$SECONDS
# QEMU runs under timeout(1), which puts itself in a process group of its own: a caller that
# stops this script (SIGTERM; SIGINT and SIGHUP too where they are not ignored, as bash ignores
# SIGINT for a script it starts in the background) would otherwise leave the VM running, two
# busy vCPUs until its limit. The trap, set before QEMU starts, passes the signal on (timeout
# passes it to QEMU), and the script waits for QEMU to end before it ends.
QPID=""; STOPPED=""
trap 'STOPPED=1; [ -n "$QPID" ] && kill -TERM "$QPID" 2>/dev/null' TERM INT HUP
timeout -k 5 "${SIWVM_TIMEOUT:-240}" "${QEMU[@]}" < /dev/null > "$RES/console.log" 2>&1 &
QPID=$!
[ -n "$STOPPED" ] && kill -TERM "$QPID" 2>/dev/null  # a signal before QPID was known
wait "$QPID"; QRC=$?
# A trapped signal ends a wait early: wait again while QEMU's timeout(1) is still this shell's
# child (its parent in /proc is us; a reaped PID reused by another process is not).
if [ -n "$STOPPED" ]; then
  for _ in $(seq 1 50); do
    [ "$(awk '{print $4}' "/proc/$QPID/stat" 2>/dev/null)" = "$$" ] || break
    wait "$QPID" 2>/dev/null
  done
  QRC=stopped
fi
trap - TERM INT HUP
tr -d '\r' < "$RES/console.log" > "$RES/console.txt" && mv "$RES/console.txt" "$RES/console.log"
RC=$(cat "$RES/out/scenario.rc" 2>/dev/null || echo 125)
[ "$QRC" = 124 ] && RC=124
[ -n "$STOPPED" ] && RC=143
echo "accel=$ACCEL qemu_rc=$QRC scenario_rc=$RC wall_s=$((SECONDS - T0))" > "$RES/run-summary.txt"
echo "[siwvm run] $SCEN: $(cat "$RES/run-summary.txt") results=$RES"
exit "$RC"
