#!/bin/busybox sh
# shellcheck shell=dash
# /init of the BlueZ test VM's initramfs (built into it by prepare.sh; edit, then rerun
# prepare.sh). Loads virtio + 9p, mounts the host's / read-only (tag hostroot), the
# read-only shares at their host paths (tags share1..N: the repository, the VM cache, what
# run-in-vm.sh --share names) and the writable results share (tag results), then chroots
# into the host's / and runs guest-init.sh with the host's bash. Always powers off.
# With BOOT=systemd in vm.conf (run-in-vm.sh --systemd) the root is an overlay instead and
# it switch_roots into systemd, which runs guest-init-systemd.sh as a unit and powers off.
/bin/busybox mkdir -p /proc /sys /dev /bin
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
exec </dev/console >/dev/console 2>&1

say() { echo "bluez-vm-init: $*"; }
halt() {
  [ -n "$1" ] && say "FATAL: $1" && [ -d /res ] && echo "$1" >>/res/init-error 2>/dev/null
  sync
  umount -r /newroot 2>/dev/null
  poweroff -f
  sleep 5
  echo o >/proc/sysrq-trigger
}

for m in $(cat /modules.order); do
  insmod "/lib/modules/$m" || halt "insmod $m failed"
done

OPTS=trans=virtio,version=9p2000.L,msize=262144
mount -t 9p -o "$OPTS" results /res || halt "cannot mount the results share"
[ -f /res/vm.conf ] || halt "no vm.conf in the results share"
# vm.conf (written by run-in-vm.sh): RESULTS_PATH=..., GUEST_INIT=..., ROOT_CACHE=...,
# SHARE_COUNT=N, SHARE_1=... SHARE_N=... (parents before what lies inside them)
. /res/vm.conf
R=/newroot
if [ "${BOOT:-chroot}" = systemd ]; then
  # systemd as PID 1 (run-in-vm.sh --systemd): the host's / read-only as the lower layer
  # of an overlay whose upper layer is a tmpfs, so systemd, dpkg and sysusers get the
  # writable /etc and /var they need; the host's files are never written.
  mkdir -p /lower /ovl
  mount -t 9p -o "$OPTS,ro,cache=${ROOT_CACHE:-loose}" hostroot /lower || halt "cannot mount hostroot"
  mount -t tmpfs -o mode=755 tmpfs /ovl || halt "tmpfs for the overlay"
  mkdir -p /ovl/upper /ovl/work
  mount -t overlay -o lowerdir=/lower,upperdir=/ovl/upper,workdir=/ovl/work,redirect_dir=off,index=off,metacopy=off \
    overlay $R || halt "cannot mount the overlay root"
  mount -t tmpfs -o mode=1777 tmpfs $R/tmp || halt "tmpfs /tmp"
  # The host these tests run on may be a container, and its / then holds /.dockerenv:
  # systemd would take the guest for a container too, and, among other things, leave every
  # mount private, so the credentials it mounts for a unit (LoadCredential=) never reach
  # the unit. Removed here, in the overlay only.
  rm -f $R/.dockerenv $R/.containerenv
  i=1
  while [ "$i" -le "${SHARE_COUNT:-0}" ]; do
    share=""; eval "share=\$SHARE_$i"
    mkdir -p "$R$share" 2>/dev/null
    mount -t 9p -o "$OPTS,ro,cache=${ROOT_CACHE:-loose}" "share$i" "$R$share" || halt "cannot mount share$i at $share"
    i=$((i + 1))
  done
  mkdir -p "$R$RESULTS_PATH" 2>/dev/null
  mount -o bind /res "$R$RESULTS_PATH" || halt "cannot bind the results share to $RESULTS_PATH"
  # Units (the guest script's own, masks) that run-in-vm.sh prepared for /etc/systemd/system.
  [ -d /res/systemd-system ] && cp -a /res/systemd-system/. $R/etc/systemd/system/
  say "switch_root: systemd"
  umount /proc /sys /dev 2>/dev/null
  # exec returns only when switch_root cannot run.
  # shellcheck disable=SC2093
  exec switch_root $R /lib/systemd/systemd
  halt "switch_root failed"
fi
mount -t 9p -o "$OPTS,ro,cache=${ROOT_CACHE:-loose}" hostroot /newroot || halt "cannot mount hostroot"

mount -t proc proc $R/proc || halt "proc"
mount -t sysfs sysfs $R/sys || halt "sysfs"
mount -t devtmpfs devtmpfs $R/dev || halt "devtmpfs"
mkdir -p $R/dev/pts $R/dev/shm 2>/dev/null
# devtmpfs has no /dev/fd (udev makes it); bash's <(...) needs it.
ln -sf /proc/self/fd $R/dev/fd
ln -sf /proc/self/fd/0 $R/dev/stdin
ln -sf /proc/self/fd/1 $R/dev/stdout
ln -sf /proc/self/fd/2 $R/dev/stderr
mount -t devpts devpts $R/dev/pts 2>/dev/null
mount -t tmpfs -o mode=1777 tmpfs $R/dev/shm 2>/dev/null
mount -t tmpfs -o mode=1777 tmpfs $R/tmp || halt "tmpfs /tmp"
mount -t tmpfs -o mode=755 tmpfs $R/run || halt "tmpfs /run"
mount -t tmpfs -o mode=700 tmpfs $R/var/lib/bluetooth || halt "tmpfs /var/lib/bluetooth (is bluez installed on the host?)"
# The shares go over the tmpfs above (a clone under /tmp), hence after them. mkdir works
# when the path lies on one of those tmpfs; otherwise it exists on the host already.
i=1
while [ "$i" -le "${SHARE_COUNT:-0}" ]; do
  eval "share=\$SHARE_$i"
  mkdir -p "$R$share" 2>/dev/null
  mount -t 9p -o "$OPTS,ro,cache=${ROOT_CACHE:-loose}" "share$i" "$R$share" || halt "cannot mount share$i at $share"
  i=$((i + 1))
done
# The results share appears in the guest at the host's path (mkdir works when that path
# lies on one of the tmpfs above; otherwise the directory exists on the host already).
mkdir -p "$R$RESULTS_PATH" 2>/dev/null
mount -o bind /res "$R$RESULTS_PATH" || halt "cannot bind the results share to $RESULTS_PATH"

say "chroot: $GUEST_INIT"
chroot $R /bin/bash "$GUEST_INIT" "$RESULTS_PATH"
say "guest-init exited $?"
umount "$R$RESULTS_PATH" 2>/dev/null
i=${SHARE_COUNT:-0}
while [ "$i" -ge 1 ]; do
  eval "share=\$SHARE_$i"
  umount "$R$share" 2>/dev/null
  i=$((i - 1))
done
umount /res 2>/dev/null
halt ""
