# lib.sh - helpers for guest scenarios (busybox sh), sourced by each scenario.
# busybox-static prefers its own applets over PATH; functions win over applets.
ip() { /bin/ip "$@"; }
ss() { /bin/ss "$@"; }
tc() { /sbin/tc "$@"; }
log() { echo "[guest $(cut -d' ' -f1 /proc/uptime)] $*"; }
# wait_listen PORT [TENTHS]: until a TCP listener on PORT exists (siw listens with a kernel socket)
wait_listen() {
  i=0; while [ "$i" -lt "${2:-150}" ]; do ss -ltn 2>/dev/null | grep -q ":$1 " && return 0; sleep 0.1; i=$((i + 1)); done
  log "no listener on port $1"; return 1
}
# mark NAME: a file the host polls for (through the 9p share) to know the guest reached a step
mark() { : > "$OUT/$1"; sync; }
