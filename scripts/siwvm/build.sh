#!/bin/bash
# scripts/siwvm/build.sh [CACHE_DIR] - build the siw test VM image from Debian 12 packages only.
#
# Output (cached; rebuilt only when missing or when SIWVM_REBUILD=1):
#   CACHE_DIR/vmlinuz  CACHE_DIR/initramfs.cpio.gz  CACHE_DIR/kver  CACHE_DIR/build.log
# CACHE_DIR defaults to $SIWVM_CACHE or <source>/build/siwvm.
#
# What it does (every step under `timeout`):
#   1. apt-get update (once), apt-get install the host tools it needs (qemu-system-x86, cpio,
#      kmod, xz-utils, zstd, gcc, make, tcpdump, tshark), non-interactively;
#   2. apt-get download the kernel linux-image-amd64 depends on, busybox-static, rdma-core's
#      userspace (libibverbs1, ibverbs-providers, librdmacm1, rdmacm-utils, ibverbs-utils,
#      perftest), iproute2 (for `rdma`), tcpdump, and the library closure; dpkg -x them;
#   3. builds siw.ko out of tree from linux-source-6.1 against the matching linux-headers
#      (Debian's kernel is configured without CONFIG_RDMA_SIW);
#   4. resolves the insmod order with depmod/modprobe --show-depends;
#   5. copies the binaries with their shared-library closure (plus the dlopen'ed verbs
#      providers and libgcc_s), installs init.sh as /init, and packs a gzip'ed cpio initramfs.
# Env: SIWVM_REBUILD=1 forces a rebuild; SIWVM_HOSTDEPS=0 skips host package installation;
#      SIWVM_KPKG=linux-image-6.1.0-NN-amd64 pins the kernel.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SRC="$(cd "$HERE/../.." && pwd)"
CACHE="${1:-${SIWVM_CACHE:-$SRC/build/siwvm}}"
mkdir -p "$CACHE"; CACHE="$(cd "$CACHE" && pwd)"

if [ "${SIWVM_REBUILD:-0}" != 1 ] && [ -s "$CACHE/vmlinuz" ] && [ -s "$CACHE/initramfs.cpio.gz" ] \
   && [ -s "$CACHE/kver" ] && command -v qemu-system-x86_64 >/dev/null 2>&1 \
   && [ "$(cat "$CACHE/init.sha256" 2>/dev/null)" = "$(cat "$HERE/init.sh" "$HERE/build.sh" | sha256sum | cut -d' ' -f1)" ]; then
  echo "[siwvm build] cached image in $CACHE ($(cat "$CACHE/kver"))"
  exit 0
fi

exec > >(tee "$CACHE/build.log") 2>&1
T0=$SECONDS
log() { echo "[siwvm build $((SECONDS - T0))s] $*"; }
die() { log "ERROR: $*"; exit 1; }
export DEBIAN_FRONTEND=noninteractive

# ------------------------------------------------------------------ 1. host tools
APT_UPDATED=0
apt_update() {
  [ "$APT_UPDATED" = 1 ] && return 0
  log "apt-get update"
  timeout 300 apt-get update -q >/dev/null || die "apt-get update failed"
  APT_UPDATED=1
}
if [ "${SIWVM_HOSTDEPS:-1}" = 1 ]; then
  need=""
  for p in qemu-system-x86 cpio kmod xz-utils zstd gcc make tcpdump tshark bc; do
    dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"
  done
  if [ -n "$need" ]; then
    apt_update
    log "apt-get install:$need"
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null || true
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    timeout 900 $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $need >/dev/null \
      || die "apt-get install$need failed"
  fi
fi
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not available"
# apt-cache needs package lists
[ -n "$(ls /var/lib/apt/lists/*Packages* 2>/dev/null | head -1)" ] || apt_update

# ------------------------------------------------------------------ 2. packages
KPKG="${SIWVM_KPKG:-$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')}"
if [ -z "$KPKG" ]; then apt_update
  KPKG="$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')"; fi
[ -n "$KPKG" ] || die "cannot resolve the kernel package behind linux-image-amd64"
log "kernel package: $KPKG"

DEBS="$CACHE/debs"; STAGE="$CACHE/stage"; KSTAGE="$CACHE/kstage"; ROOT="$CACHE/root"
mkdir -p "$DEBS"
TOP="busybox-static libibverbs1 ibverbs-providers librdmacm1 rdmacm-utils ibverbs-utils perftest iproute2 tcpdump rdma-core"
CLOSURE=$(timeout 60 apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
          --no-breaks --no-replaces --no-enhances $TOP | grep -v '^ ' | grep -v '^<' | sort -u)
PKGS="$TOP"
for p in $CLOSURE; do
  case "$p" in
    *-dev|*-doc|*-bin|libc-l10n|libpam*) ;;
    lib*|zlib1g) PKGS="$PKGS $p" ;;
  esac
done
PKGS="$(echo $PKGS | tr ' ' '\n' | sort -u | tr '\n' ' ')"
KMM=6.1
KVER_GUESS="${KPKG#linux-image-}"
KABI="${KVER_GUESS%-amd64}"
KBPKG=$(apt-cache depends "linux-headers-$KVER_GUESS" 2>/dev/null | awk '/Depends: linux-kbuild/{print $2; exit}')
HPKGS="linux-headers-$KVER_GUESS linux-headers-$KABI-common ${KBPKG:-linux-kbuild-$KMM} linux-source-$KMM"
fetch() {
  local miss="" p
  for p in "$@"; do ls "$DEBS/${p}"_*.deb >/dev/null 2>&1 || miss="$miss $p"; done
  [ -z "$miss" ] && return 0
  log "apt-get download:$miss"
  ( cd "$DEBS" && timeout 900 apt-get download -q $miss >/dev/null ) || { apt_update; ( cd "$DEBS" && timeout 900 apt-get download -q $miss >/dev/null ); }
}
fetch $KPKG $PKGS $HPKGS || die "apt-get download failed"
deb() { ls "$DEBS/${1}"_*.deb | head -1; }

rm -rf "$STAGE" "$KSTAGE" "$ROOT"; mkdir -p "$STAGE" "$KSTAGE" "$ROOT"
for p in $PKGS; do timeout 60 dpkg -x "$(deb "$p")" "$STAGE"; done
timeout 120 dpkg -x "$(deb "$KPKG")" "$KSTAGE"
KVER=$(ls "$KSTAGE/lib/modules" | head -1)
cp "$KSTAGE/boot/vmlinuz-$KVER" "$CACHE/vmlinuz.tmp"
log "kernel $KVER, $(echo $PKGS | wc -w) userspace packages unpacked"

# ------------------------------------------------------------------ 3. siw.ko
KB="$CACHE/kbuild"; rm -rf "$KB"; mkdir -p "$KB"
for p in $HPKGS; do [ "$p" = "linux-source-$KMM" ] || timeout 120 dpkg -x "$(deb "$p")" "$KB"; done
KH="$KB/usr/src/linux-headers-$KVER"
[ -d "$KH" ] || die "no headers for $KVER in $HPKGS"
# the headers' Makefile includes the -common tree by absolute path
sed -i "s#include /usr/src/#include $KB/usr/src/#" "$KH/Makefile"
SIWSRC="$CACHE/siwsrc"; rm -rf "$SIWSRC"; mkdir -p "$SIWSRC"
timeout 300 sh -c "dpkg --fsys-tarfile '$(deb linux-source-$KMM)' | tar -xO ./usr/src/linux-source-$KMM.tar.xz \
  | tar -xJ -C '$SIWSRC' --strip-components=5 linux-source-$KMM/drivers/infiniband/sw/siw" \
  || die "cannot extract siw from linux-source-$KMM"
log "building siw.ko from linux-source-$KMM"
timeout 600 make -s -C "$KH" M="$SIWSRC" CONFIG_RDMA_SIW=m modules -j"$(nproc)" || die "siw.ko build failed"
strip --strip-debug "$SIWSRC/siw.ko"
mkdir -p "$KSTAGE/lib/modules/$KVER/updates"
cp "$SIWSRC/siw.ko" "$KSTAGE/lib/modules/$KVER/updates/siw.ko"

# ------------------------------------------------------------------ 4. modules
timeout 120 depmod -b "$KSTAGE" "$KVER"
# netem, ingress, mirred, matchall and ifb: the impaired cases (n*) of scripts/siw-interop.sh set
# loss, delay and reordering on the guest's link, both ways (egress netem; ingress through ifb0)
MODS="virtio_pci virtio_net 9pnet_virtio 9p siw rdma_ucm rdma_cm iw_cm ib_cm ib_uverbs crc32c_generic libcrc32c af_packet sch_netem sch_ingress act_mirred cls_matchall ifb"
: > "$CACHE/modules.order"
for m in $MODS; do
  modprobe -d "$KSTAGE" -S "$KVER" --show-depends "$m" >> "$CACHE/modules.order" 2>/dev/null \
    || echo "# $m not found" >> "$CACHE/modules.order"
done
MODDIR="$ROOT/lib/modules/$KVER"; mkdir -p "$MODDIR"
: > "$ROOT/modules.insmod"
awk '!seen[$0]++' "$CACHE/modules.order" | while read -r kind path rest; do
  [ "$kind" = insmod ] || continue
  rel="${path#$KSTAGE/lib/modules/$KVER/}"
  mkdir -p "$MODDIR/$(dirname "$rel")"
  case "$rel" in
    *.ko.xz)  xz -dc "$path" > "$MODDIR/${rel%.xz}"; rel="${rel%.xz}" ;;
    *.ko.zst) zstd -qdc "$path" > "$MODDIR/${rel%.zst}"; rel="${rel%.zst}" ;;
    *)        cp "$path" "$MODDIR/$rel" ;;
  esac
  echo "/lib/modules/$KVER/$rel $rest" >> "$ROOT/modules.insmod"
done
grep -q '/siw.ko' "$ROOT/modules.insmod" || die "siw.ko missing from the insmod list"
log "modules: $(wc -l < "$ROOT/modules.insmod") to insmod"

# ------------------------------------------------------------------ 5. userspace
mkdir -p "$ROOT"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,tmp,run,mnt/host,root,lib64}
cp "$STAGE/bin/busybox" "$ROOT/bin/busybox"
for a in $("$ROOT/bin/busybox" --list-full); do
  [ -e "$ROOT/$a" ] || { mkdir -p "$ROOT/$(dirname "$a")"; ln -s /bin/busybox "$ROOT/$a"; }
done
LIBPATH="$STAGE/lib/x86_64-linux-gnu:$STAGE/usr/lib/x86_64-linux-gnu:$STAGE/usr/lib/x86_64-linux-gnu/libibverbs"
LDSO="$STAGE/lib64/ld-linux-x86-64.so.2"
[ -e "$LDSO" ] || LDSO="$STAGE/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
put() {  # put STAGED_FILE: copy into ROOT at the same path, following symlinks
  local src="$1" rel t
  rel="${src#$STAGE}"
  if [ -L "$ROOT$rel" ] && [ "$(readlink "$ROOT$rel")" = /bin/busybox ]; then rm -f "$ROOT$rel"; fi
  { [ -e "$ROOT$rel" ] || [ -L "$ROOT$rel" ]; } && return 0
  mkdir -p "$ROOT$(dirname "$rel")"
  if [ -L "$src" ]; then
    t="$(readlink "$src")"; ln -s "$t" "$ROOT$rel"
    case "$t" in /*) put "$STAGE$t" ;; *) put "$(dirname "$src")/$t" ;; esac
  else
    cp -p "$src" "$ROOT$rel"
  fi
}
put_elf() {  # put_elf FILE: the file plus its shared-library closure resolved in STAGE
  put "$1"
  "$LDSO" --library-path "$LIBPATH" --list "$1" 2>/dev/null \
    | awk '/=>/ && $3 ~ /^\// {print $3}' | while read -r lib; do
      case "$lib" in "$STAGE"/*) put "$lib" ;; *) log "WARN: $1 needs $lib (not staged)" ;; esac
    done
}
put "$STAGE/lib64/ld-linux-x86-64.so.2"
BINS=""
for b in rping ucmatose ibv_devices ibv_devinfo ip rdma ss tc tcpdump ib_write_bw ib_read_bw ib_send_bw; do
  f=$(find "$STAGE/usr/bin" "$STAGE/usr/sbin" "$STAGE/bin" "$STAGE/sbin" -maxdepth 1 -name "$b" 2>/dev/null | head -1)
  [ -n "$f" ] || { log "WARN: $b not in the staged packages"; continue; }
  while [ -L "$f" ]; do t="$(readlink "$f")"; case "$t" in /*) f="$STAGE$t" ;; *) f="$(dirname "$f")/$t" ;; esac; done
  put_elf "$f"
  rel="${f#$STAGE}"
  # the real tool, not a busybox applet, wherever PATH finds the name first
  for d in /usr/sbin /usr/bin /sbin /bin; do
    [ "$d/$b" = "$rel" ] && continue
    if [ -L "$ROOT$d/$b" ] && [ "$(readlink "$ROOT$d/$b")" = /bin/busybox ]; then ln -sf "$rel" "$ROOT$d/$b"; fi
  done
  BINS="$BINS $b"
done
for f in "$STAGE"/usr/lib/x86_64-linux-gnu/libibverbs/*.so; do put_elf "$f"; done
cp -a "$STAGE/etc/libibverbs.d" "$ROOT/etc/"
# glibc dlopens libgcc_s for pthread_exit (rping aborts without it)
for f in "$STAGE"/lib/x86_64-linux-gnu/libgcc_s.so* "$STAGE"/lib/x86_64-linux-gnu/libnss_files.so*; do
  [ -e "$f" ] && put "$f"; done
printf 'root:x:0:0:root:/root:/bin/sh\ntcpdump:x:0:0::/root:/bin/sh\n' > "$ROOT/etc/passwd"
printf 'root:x:0:\n' > "$ROOT/etc/group"
printf '127.0.0.1 localhost\n10.0.2.15 guest\n10.0.2.2 host\n' > "$ROOT/etc/hosts"
printf 'hosts: files\n' > "$ROOT/etc/nsswitch.conf"
echo "$KVER" > "$ROOT/etc/kver"
install -m 755 "$HERE/init.sh" "$ROOT/init"

# ------------------------------------------------------------------ pack
( cd "$ROOT" && find . -print0 | cpio --null -o -H newc --quiet ) | gzip -1 > "$CACHE/initramfs.cpio.gz.tmp"
mv "$CACHE/initramfs.cpio.gz.tmp" "$CACHE/initramfs.cpio.gz"
mv "$CACHE/vmlinuz.tmp" "$CACHE/vmlinuz"
echo "$KVER" > "$CACHE/kver"
# the image depends on init.sh and on this script (its package and tool lists)
cat "$HERE/init.sh" "$HERE/build.sh" | sha256sum | cut -d' ' -f1 > "$CACHE/init.sha256"
rm -rf "$STAGE" "$KSTAGE" "$KB"
log "done: $CACHE/vmlinuz, $CACHE/initramfs.cpio.gz ($(du -h "$CACHE/initramfs.cpio.gz" | cut -f1)); binaries:$BINS"
