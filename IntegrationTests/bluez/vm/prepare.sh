#!/usr/bin/env bash
# Prepare the BlueZ test VM (idempotent, cached).
#
#   IntegrationTests/bluez/vm/prepare.sh [--force]
#
# 1. Debian packages: qemu, busybox-static, kmod, bluez (+ test tools/scripts),
#    python3-dbus/gi/venv, dbus, cpio (apt-get install when root, else says what to install).
# 2. The kernel that `linux-image-amd64` depends on: `apt-get download` + `dpkg -x` into
#    .cache/bluez-vm/kernel-VERSION (never installed), then `depmod`.
# 3. A tiny busybox initramfs with the virtio + 9p (+ overlay) modules and initramfs-init.sh.
# 4. A venv with bleak: .cache/bluez-vm/venv (system python, --system-site-packages).
#
# Everything lives in REPO/.cache/bluez-vm (or BLUEZ_VM_CACHE); run-in-vm.sh shares it with
# the guest at the same path, wherever it is.
# Each step is skipped when its stamp matches. Environment:
#   BLUEZ_VM_KERNEL=6.1.0-57-amd64   use this kernel ABI instead of linux-image-amd64's
#   BLUEZ_VM_BLEAK='bleak>=3.1,<4'   pip requirement for bleak
#   BLUEZ_VM_CACHE=DIR               cache folder (default REPO/.cache/bluez-vm)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
CACHE="${BLUEZ_VM_CACHE:-$REPO/.cache/bluez-vm}"
BLEAK_REQ="${BLUEZ_VM_BLEAK:-bleak>=3.1,<4}"
FORCE=0
[[ "${1:-}" == "--force" ]] && FORCE=1

log() { printf 'prepare.sh: %s\n' "$*" >&2; }
die() { printf 'prepare.sh: ERROR: %s\n' "$*" >&2; exit 1; }

mkdir -p "$CACHE"
# Serialise concurrent prepare runs (two suites starting at once).
exec 9>"$CACHE/.prepare.lock"
flock 9

# ---------------------------------------------------------------- 1. packages
PKGS=(qemu-system-x86 busybox-static kmod bluez bluez-test-tools bluez-test-scripts
      python3-dbus python3-gi python3-venv dbus cpio gzip xz-utils jq curl)
missing=()
for p in "${PKGS[@]}"; do
  if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" != "install ok installed" ]]; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    log "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  else
    die "missing Debian packages; run as root: apt-get install --no-install-recommends ${missing[*]}"
  fi
fi

# ---------------------------------------------------------------- 2. kernel
kernel_abi() {
  # "Depends: linux-image-6.1.0-57-amd64" -> 6.1.0-57-amd64
  apt-cache depends linux-image-amd64 2>/dev/null |
    sed -n 's/^ *Depends: linux-image-\([0-9][^ ]*\)$/\1/p' | head -n1
}
KVER="${BLUEZ_VM_KERNEL:-}"
if [[ -z "$KVER" ]]; then
  KVER="$(kernel_abi)"
  if [[ -z "$KVER" && $(id -u) -eq 0 ]]; then
    apt-get update -qq || true
    KVER="$(kernel_abi)"
  fi
  if [[ -z "$KVER" && -s "$CACHE/kernel-version" ]]; then
    KVER="$(cat "$CACHE/kernel-version")"
    log "apt-cache cannot resolve linux-image-amd64; reusing cached kernel $KVER"
  fi
  [[ -n "$KVER" ]] || die "cannot resolve linux-image-amd64's kernel (apt-get update?)"
fi
KDIR="$CACHE/kernel-$KVER"
if [[ $FORCE -eq 1 || ! -f "$KDIR/.stamp" ]]; then
  log "fetching kernel linux-image-$KVER"
  rm -rf "$KDIR" "$CACHE/debs"
  mkdir -p "$CACHE/debs" "$KDIR"
  # apt-get download as root warns that it runs unsandboxed when _apt cannot write here.
  (cd "$CACHE/debs" && apt-get download -q "linux-image-$KVER" >&2 2> >(grep -v 'unsandboxed' >&2)) ||
    die "apt-get download linux-image-$KVER failed"
  deb="$(ls "$CACHE/debs/linux-image-${KVER}_"*.deb | head -n1)"
  dpkg -x "$deb" "$KDIR"
  [[ -f "$KDIR/boot/vmlinuz-$KVER" ]] || die "no boot/vmlinuz-$KVER in $deb"
  [[ -d "$KDIR/lib/modules/$KVER" ]] || die "no lib/modules/$KVER in $deb"
  depmod -b "$KDIR" "$KVER"
  rm -rf "$CACHE/debs"
  basename "$deb" >"$KDIR/.stamp"
fi
echo "$KVER" >"$CACHE/kernel-version.new" && mv "$CACHE/kernel-version.new" "$CACHE/kernel-version"
# Drop kernels (about 400 MB each unpacked) and initramfs images of other versions.
for old in "$CACHE"/kernel-*/ "$CACHE"/initramfs-*.cpio.gz*; do
  [[ -e "$old" ]] || continue
  case "$old" in "$KDIR/"|"$CACHE/initramfs-$KVER.cpio.gz"*) continue ;; esac
  log "removing $old (not $KVER)"
  rm -rf "$old"
done

# ---------------------------------------------------------------- 3. initramfs
# Modules the initramfs needs, in the order that works (dependencies are added by
# modprobe --show-depends; built-in ones are skipped).
INITRD_MODS=(virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci
             netfs fscache 9pnet 9pnet_virtio 9p
             overlay)   # run-in-vm.sh --systemd: a writable overlay root for systemd as PID 1
INITRD="$CACHE/initramfs-$KVER.cpio.gz"
BUSYBOX=/bin/busybox
[[ -x "$BUSYBOX" ]] || die "$BUSYBOX missing (busybox-static)"
file_is_static() { ! ldd "$1" >/dev/null 2>&1; }
file_is_static "$BUSYBOX" || die "$BUSYBOX is not static: install busybox-static"
stamp="$(cat "$HERE/initramfs-init.sh" "$BUSYBOX" "$KDIR/.stamp" "$0" | sha256sum | cut -c1-16)"
if [[ $FORCE -eq 1 || ! -f "$INITRD" || "$(cat "$INITRD.stamp" 2>/dev/null)" != "$stamp" ]]; then
  log "building initramfs for $KVER"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work"/{bin,dev,proc,sys,newroot,res,lib/modules}
  cp "$BUSYBOX" "$work/bin/busybox"
  cp "$HERE/initramfs-init.sh" "$work/init"
  chmod 755 "$work/init" "$work/bin/busybox"
  : >"$work/modules.order"
  declare -A seen=()
  for m in "${INITRD_MODS[@]}"; do
    while read -r kind path _; do
      [[ "$kind" == insmod ]] || continue            # "builtin NAME" lines
      [[ -n "${seen[$path]:-}" ]] && continue
      seen[$path]=1
      name="$(basename "$path")"
      case "$name" in
        *.ko.xz)  xz -dc "$path" >"$work/lib/modules/${name%.xz}"; name="${name%.xz}" ;;
        *.ko.zst) zstd -qdc "$path" >"$work/lib/modules/${name%.zst}"; name="${name%.zst}" ;;
        *.ko.gz)  gzip -dc "$path" >"$work/lib/modules/${name%.gz}"; name="${name%.gz}" ;;
        *)        cp "$path" "$work/lib/modules/$name" ;;
      esac
      echo "$name" >>"$work/modules.order"
    done < <(modprobe -d "$KDIR" -S "$KVER" --show-depends "$m" ||
             die "module $m not found in $KVER")
  done
  (cd "$work" && find . -print0 | cpio --null -o -H newc --quiet | gzip -9) >"$INITRD.new"
  mv "$INITRD.new" "$INITRD"
  echo "$stamp" >"$INITRD.stamp"
  log "initramfs: $(tr '\n' ' ' <"$work/modules.order")"
  rm -rf "$work"
  trap - EXIT
fi

# ---------------------------------------------------------------- 4. venv with bleak
VENV="$CACHE/venv"
venv_stamp="$(printf '%s\n%s\n' "$BLEAK_REQ" "$(/usr/bin/python3 -V 2>&1)")"
if [[ $FORCE -eq 1 || ! -x "$VENV/bin/python3" || "$(cat "$VENV/.stamp" 2>/dev/null)" != "$venv_stamp" ]]; then
  log "creating venv $VENV with $BLEAK_REQ"
  rm -rf "$VENV"
  /usr/bin/python3 -m venv --system-site-packages "$VENV"
  "$VENV/bin/python3" -m pip install -q --disable-pip-version-check "$BLEAK_REQ" >&2
  "$VENV/bin/python3" -c 'import bleak, dbus, gi' || die "venv cannot import bleak/dbus/gi"
  printf '%s\n' "$venv_stamp" >"$VENV/.stamp"
fi

mkdir -p "$CACHE/runs"
log "ready: kernel $KVER, $(basename "$INITRD"), venv bleak $("$VENV/bin/python3" -c 'import importlib.metadata as m; print(m.version("bleak"))')"
