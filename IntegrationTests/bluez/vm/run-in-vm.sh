#!/usr/bin/env bash
# Run a bash script inside a throw-away VM that has Bluetooth: Debian's kernel under qemu
# (TCG), the host's / as a read-only root, two linked virtual LE controllers (btvirt -L -l2:
# hci0 00:AA:01:00:00:00, hci1 00:AA:01:01:00:01), the system D-Bus and bluetoothd.
#
#   IntegrationTests/bluez/vm/run-in-vm.sh [OPTIONS] SCRIPT [ARGS...]
#
# SCRIPT runs in the guest as `bash SCRIPT ARGS...` (cwd: the caller's cwd), at the same
# path as on the host. The guest sees the host's / read-only, except /tmp, /run, /dev,
# /proc, /sys and /var/lib/bluetooth (fresh file systems there), and, at their host paths
# wherever they are (/tmp included), read-only: this repository, the VM cache and every
# --share DIR. So a clone under /tmp works; anything else the guest must read under those
# folders needs --share. Its stdout+stderr are streamed to this script's stdout; its exit
# code becomes this script's exit code.
# Guest scripts can `source "$BLUEZ_VM_DIR/guest-lib.sh"` (see that file).
#
# Options:
#   --timeout SECS     kill the VM after SECS (default $BLUEZ_VM_TIMEOUT or 300); exit 124
#   (BLUEZ_VM_BOOT_TIMEOUT, default 420: a guest that has not begun the script by then is
#   killed, exit 125 with the reason in init-error. Under TCG on a loaded host a guest has
#   hung while booting, udev workers in a soft lockup for good; a caller may boot again.)
#   --env NAME=VALUE   export NAME in the guest script (repeatable); --env NAME copies
#                      the host's value
#   --bluetoothd-args "ARGS"  extra options for the first bluetoothd (same as the
#                      BLUETOOTHD_ARGS environment variable), e.g. "-f /path/main.conf"
#   --no-bluetoothd    do not start bluetoothd (the script calls start_bluetoothd itself)
#   --btmon            record all HCI traffic to RESULTS/btmon.log (also BLUEZ_VM_BTMON=1)
#   --controllers N    btvirt -L -lN: N linked LE controllers hci0..hci(N-1), addresses
#                      00:AA:01:0k:00:0k (default 2; e.g. 4 for a second central on
#                      hci2, which must first connect to hci3: see guest-lib.sh)
#   --host-port PORT   let the guest reach the host's 127.0.0.1:PORT (TCP) as
#                      $BLUEZ_VM_HOST_ADDR:PORT (repeatable). The guest gets a virtio-net
#                      eth0 (10.0.2.15/24) on qemu's user network with restrict=on: it
#                      reaches nothing else; each connection is relayed by host-relay.py
#                      (spawned per connection on the host). Without it: no network.
#   --share DIR        show the host's DIR to the guest at the same path, read-only
#                      (repeatable; the repository and the VM cache always are)
#   --results DIR      results folder (kept); default: a fresh REPO/.cache/bluez-vm/runs/
#                      run.XXXXXX, deleted after a run that exits 0 unless --keep
#   --keep             keep the default results folder
#   --verbose          also stream the guest's serial console (boot/setup log) to stderr
#   --systemd          boot systemd as PID 1 instead of a chroot: the root is an overlay
#                      (the host's / read-only below, a tmpfs above: /etc, /var writable,
#                      nothing reaches the host), /tmp a tmpfs; the script runs as the
#                      unit bluez-vm-guest.service (guest-init-systemd.sh: btvirt, eth0
#                      with --host-port, bluetooth.service) and the VM powers off after it
#
# Results folder (writable 9p share, same path in the guest as $VM_RESULTS):
#   output.log  the script's stdout+stderr   exit-code   its exit code
#   console.log serial console               setup.log   guest setup (modules, btvirt, ...)
#   bluetoothd.log, btvirt.log, btmon.log    anything the script writes to $VM_RESULTS
#
# Exit codes: the script's own; 124 the VM timed out; 125 the VM failed before the script
# ended (setup error, crash); 2 usage error.
# Environment: BLUEZ_VM_TIMEOUT, BLUEZ_VM_MEM (MiB, default 1024), BLUEZ_VM_SMP (default 2),
# BLUEZ_VM_CPU (qemu -cpu model under TCG, default qemu64; e.g. max, Skylake-Client),
# BLUEZ_VM_APPEND (extra kernel arguments), BLUETOOTHD_ARGS, BLUEZ_VM_CACHE (default
# REPO/.cache/bluez-vm).
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
CACHE="${BLUEZ_VM_CACHE:-$REPO/.cache/bluez-vm}"
ME=run-in-vm.sh

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
die() { echo "$ME: ERROR: $*" >&2; exit 2; }

TIMEOUT="${BLUEZ_VM_TIMEOUT:-300}"
RESULTS=""
KEEP=0
VERBOSE=0
NO_BTD=0
BTMON="${BLUEZ_VM_BTMON:-0}"
BTD_ARGS="${BLUETOOTHD_ARGS:-}"
ENV_LINES=()
HOST_PORTS=()
SHARES=()
CONTROLLERS=2
SYSTEMD=0
while (($#)); do
  case "$1" in
    --timeout) TIMEOUT="${2:?}"; shift 2 ;;
    --timeout=*) TIMEOUT="${1#*=}"; shift ;;
    --env)
      [[ $# -ge 2 ]] || usage
      case "$2" in
        *=*) n="${2%%=*}"; v="${2#*=}" ;;
        *) n="$2"; v="${!2-}" ;;
      esac
      [[ "$n" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "bad --env name: $n"
      ENV_LINES+=("export $n=$(printf '%q' "$v")")
      shift 2 ;;
    --bluetoothd-args) BTD_ARGS="${2-}"; shift 2 ;;
    --no-bluetoothd) NO_BTD=1; shift ;;
    --btmon) BTMON=1; shift ;;
    --controllers) CONTROLLERS="${2:?}"; shift 2 ;;
    --host-port)
      [[ "${2-}" =~ ^[0-9]+$ ]] && (($2 >= 1 && $2 <= 65535)) || die "--host-port wants a TCP port, got '${2-}'"
      HOST_PORTS+=("$2"); shift 2 ;;
    --share)
      d="$(realpath -e "${2:?}" 2>/dev/null)" && [[ -d "$d" ]] || die "--share wants a folder, got '${2-}'"
      SHARES+=("$d"); shift 2 ;;
    --results) RESULTS="${2:?}"; KEEP=1; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --verbose|-v) VERBOSE=1; shift ;;
    --systemd) SYSTEMD=1; shift ;;
    -h|--help) usage ;;
    --) shift; break ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) break ;;
  esac
done
(($#)) || usage
[[ "$TIMEOUT" =~ ^[0-9]+$ ]] || die "--timeout wants whole seconds"
[[ "$CONTROLLERS" =~ ^[0-9]+$ ]] && ((CONTROLLERS >= 2 && CONTROLLERS <= 9)) ||
  die "--controllers wants 2..9"
SCRIPT="$(realpath -e "$1" 2>/dev/null)" || die "no such script: $1"
shift
[[ -f "$SCRIPT" ]] || die "not a file: $SCRIPT"

# ------------------------------------------------------------ prepared?
KVER="$(cat "$CACHE/kernel-version" 2>/dev/null || true)"
KERNEL="$CACHE/kernel-$KVER/boot/vmlinuz-$KVER"
INITRD="$CACHE/initramfs-$KVER.cpio.gz"
if [[ -z "$KVER" || ! -f "$KERNEL" || ! -f "$INITRD" || ! -x "$CACHE/venv/bin/python3" ||
      "$HERE/initramfs-init.sh" -nt "$INITRD" ]] || ! command -v qemu-system-x86_64 >/dev/null; then
  echo "$ME: VM not prepared; running prepare.sh" >&2
  "$HERE/prepare.sh" >&2 || { echo "$ME: prepare.sh failed" >&2; exit 125; }
  KVER="$(cat "$CACHE/kernel-version")"
  KERNEL="$CACHE/kernel-$KVER/boot/vmlinuz-$KVER"
  INITRD="$CACHE/initramfs-$KVER.cpio.gz"
fi

# ------------------------------------------------------------ shared folders
# The repository and the cache are shared explicitly: the host's / alone would hide them
# when they live under /tmp (the guest's own tmpfs). Parents are mounted before what lies
# inside them, and a folder inside another share is visible already: share the outermost.
mkdir -p "$CACHE"
mapfile -t candidates < <(printf '%s\n' "$(realpath "$REPO")" "$(realpath "$CACHE")" "${SHARES[@]}" |
  awk '{ print length($0) "\t" $0 }' | sort -n -k1,1 | cut -f2- | uniq)
GUEST_SHARES=()
for d in "${candidates[@]}"; do
  [[ "$d" != / ]] || die "cannot share / (the guest's root is the host's / already)"
  [[ "$d" != *"'"* ]] || die "a shared path must not contain quotes: $d"
  inside=0
  for p in "${GUEST_SHARES[@]}"; do [[ "$d" == "$p" || "$d" == "$p"/* ]] && inside=1; done
  ((inside)) || GUEST_SHARES+=("$d")
done
visible_in_guest() { # PATH: under a share, or outside the guest's own file systems
  local p
  for p in "${GUEST_SHARES[@]}"; do [[ "$1" == "$p"/* ]] && return 0; done
  case "$1" in /tmp/*|/run/*|/dev/*|/proc/*|/sys/*|/var/lib/bluetooth/*) return 1 ;; esac
}
visible_in_guest "$SCRIPT" ||
  die "$SCRIPT is not visible in the guest (it has its own /tmp, /run, /dev, /proc, /sys, /var/lib/bluetooth): pass --share $(dirname "$SCRIPT")"

# ------------------------------------------------------------ results share
if [[ -n "$RESULTS" ]]; then
  mkdir -p "$RESULTS" || die "cannot create $RESULTS"
  RESULTS="$(realpath "$RESULTS")"
  rm -rf "$RESULTS/systemd-system"
  rm -f "$RESULTS"/{vm.conf,run.env,output.log,exit-code,exit-code.tmp,setup-error,init-error,console.log,setup.log,bluetoothd.log,btvirt.log}
else
  mkdir -p "$CACHE/runs"
  RESULTS="$(mktemp -d "$CACHE/runs/run.XXXXXX")"
fi
[[ "$RESULTS" != *"'"* && "$RESULTS" != *" "* ]] || die "results path must not contain quotes or spaces: $RESULTS"
chmod 755 "$RESULTS"

{
  echo "RESULTS_PATH='$RESULTS'"
  if ((SYSTEMD)); then
    echo "BOOT=systemd"
    echo "GUEST_INIT='$HERE/guest-init-systemd.sh'"
  else
    echo "GUEST_INIT='$HERE/guest-init.sh'"
  fi
  echo "ROOT_CACHE='${BLUEZ_VM_ROOT_CACHE:-loose}'"
  # SHARE_i comes from the 9p tag share<i>; mounted in this order (parents first).
  echo "SHARE_COUNT=${#GUEST_SHARES[@]}"
  for i in "${!GUEST_SHARES[@]}"; do echo "SHARE_$((i + 1))='${GUEST_SHARES[$i]}'"; done
} >"$RESULTS/vm.conf"
VM_SCRIPT="$SCRIPT"
VM_ARGS=("$@")
VM_CWD="$PWD"
REPO_ROOT="$REPO"
BLUEZ_VM_DIR="$HERE"
BLUEZ_VM_CACHE="$CACHE"
BLUEZ_VM_KVER="$KVER"
BLUETOOTHD_ARGS="$BTD_ARGS"
BLUEZ_VM_NO_BLUETOOTHD="$NO_BTD"
BLUEZ_VM_BTMON="$BTMON"
BLUEZ_VM_CONTROLLERS="$CONTROLLERS"
BLUEZ_VM_HOST_ADDR=""
# Address the guest uses for the host's ports (a guestfwd address on qemu's user net).
((${#HOST_PORTS[@]})) && BLUEZ_VM_HOST_ADDR=10.0.2.100
BLUEZ_VM_HOST_PORTS="${HOST_PORTS[*]}"
{
  declare -p VM_SCRIPT VM_ARGS VM_CWD REPO_ROOT BLUEZ_VM_DIR BLUEZ_VM_CACHE BLUEZ_VM_KVER \
             BLUETOOTHD_ARGS BLUEZ_VM_NO_BLUETOOTHD BLUEZ_VM_BTMON BLUEZ_VM_CONTROLLERS \
             BLUEZ_VM_HOST_ADDR BLUEZ_VM_HOST_PORTS
  echo "export BLUETOOTHD_ARGS BLUEZ_VM_HOST_ADDR BLUEZ_VM_HOST_PORTS"
  ((${#ENV_LINES[@]})) && printf '%s\n' "${ENV_LINES[@]}"
} >"$RESULTS/run.env"

if ((SYSTEMD)); then
  # Copied by the initramfs into the overlay's /etc/systemd/system: the guest script as a
  # unit of multi-user.target (Type=simple, so the boot does not wait for it), and masks
  # for what the host's / enables but a test VM must not run (a database, timers, gettys
  # on the console the results are read from, NetworkManager: it would take eth0, which
  # --host-port sets up by hand; a test starts it itself with the unit unmasked; docker and
  # containerd, which the sandbox-docker suite installs on the host: the guest's systemd
  # tried to start dockerd three times during the boot under TCG, and no guest uses it).
  sd="$RESULTS/systemd-system"
  mkdir -p "$sd/multi-user.target.wants"
  printf '%s\n' "[Unit]" "Description=BlueZ test VM: the guest script ($(basename "$SCRIPT"))" \
    "After=dbus.service" "" "[Service]" "Type=simple" \
    "ExecStart=/bin/bash $HERE/guest-init-systemd.sh $RESULTS" "TimeoutStartSec=infinity" \
    >"$sd/bluez-vm-guest.service"
  ln -s ../bluez-vm-guest.service "$sd/multi-user.target.wants/bluez-vm-guest.service"
  # bluetooth.target too: udev pulls bluetooth.service in through it as soon as hci0
  # appears, and a bluetoothd started while btvirt is still setting up the controllers left
  # hci0 out of the kernel's management index for good (seen twice); guest-init-systemd.sh
  # starts bluetooth.service itself once every controller is there, as guest-init.sh does.
  for unit in bluetooth.target postgresql.service e2scrub_reap.service systemd-timesyncd.service systemd-pstore.service \
              getty@tty1.service serial-getty@ttyS0.service apt-daily.timer apt-daily-upgrade.timer \
              dpkg-db-backup.timer e2scrub_all.timer fstrim.timer man-db.timer \
              NetworkManager.service NetworkManager-wait-online.service NetworkManager-dispatcher.service \
              wpa_supplicant.service ModemManager.service docker.service docker.socket containerd.service; do
    ln -s /dev/null "$sd/$unit"
  done
fi

# ------------------------------------------------------------ bytecode
# The guest sees this repository read-only, so its Python cannot write the bytecode of the
# test scripts and compiles them again at every start (worker_central.py and bvm_bleak.py:
# about a second of a TCG guest's CPU each time, dozens of times a suite). Compiled here
# (__pycache__ is git-ignored) by the interpreter the guest runs; the guest runs
# worker_central as a module (python -m), the way a script's own bytecode is used.
/usr/bin/python3 -m compileall -q "$REPO/IntegrationTests" >/dev/null 2>&1 || true

# ------------------------------------------------------------ boot
q() { printf '%s' "${1//,/,,}"; }   # qemu option values escape commas by doubling
APPEND="console=ttyS0 panic=-1 oops=panic"
((VERBOSE)) || APPEND="$APPEND quiet loglevel=3"
[[ -n ${BLUEZ_VM_APPEND:-} ]] && APPEND="$APPEND $BLUEZ_VM_APPEND"
# net.ifnames=0: udev would rename eth0, which guest-lib.sh sets up for --host-port.
((SYSTEMD)) && APPEND="$APPEND systemd.unit=multi-user.target net.ifnames=0"
# qemu's options are comma-separated lists, not array elements.
# shellcheck disable=SC2054
QEMU=(qemu-system-x86_64 -nodefaults -no-user-config -no-reboot
      -accel tcg,thread=multi -cpu "${BLUEZ_VM_CPU:-qemu64}" -smp "${BLUEZ_VM_SMP:-2}" -m "${BLUEZ_VM_MEM:-1024}"
      -display none -monitor none -serial "file:$RESULTS/console.log"
      -kernel "$KERNEL" -initrd "$INITRD" -append "$APPEND"
      -fsdev "local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap"
      -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot
      -fsdev "local,id=results,path=$(q "$RESULTS"),security_model=none,multidevs=remap"
      -device virtio-9p-pci,fsdev=results,mount_tag=results)
for i in "${!GUEST_SHARES[@]}"; do
  QEMU+=(-fsdev "local,id=share$((i + 1)),path=$(q "${GUEST_SHARES[$i]}"),security_model=none,readonly=on,multidevs=remap"
         -device "virtio-9p-pci,fsdev=share$((i + 1)),mount_tag=share$((i + 1))")
done
if ((${#HOST_PORTS[@]})); then
  # restrict=on: the guest reaches only the guestfwd addresses below. A guestfwd to a
  # chardev would carry a single connection opened at start-up; cmd: spawns the relay per
  # connection. romfile= : no PXE option ROM (not installed, not needed with -kernel).
  NETDEV="user,id=net0,restrict=on"
  for p in "${HOST_PORTS[@]}"; do
    NETDEV+=",guestfwd=tcp:$BLUEZ_VM_HOST_ADDR:$p-cmd:$(q "$HERE/host-relay.py") $p"
  done
  # shellcheck disable=SC2054
  QEMU+=(-netdev "$NETDEV" -device virtio-net-pci,netdev=net0,romfile=)
fi

: >"$RESULTS/output.log"
start=$SECONDS
timeout --kill-after=10 "$TIMEOUT" "${QEMU[@]}" </dev/null >"$RESULTS/qemu.log" 2>&1 &
QPID=$!
BOOT_TIMEOUT="${BLUEZ_VM_BOOT_TIMEOUT:-420}"
( # The boot watchdog: no "BEGIN" on the console within BOOT_TIMEOUT, the guest hung booting.
  for ((waited = 0; waited < BOOT_TIMEOUT; waited += 5)); do
    sleep 5
    kill -0 "$QPID" 2>/dev/null || exit 0
    grep -q 'bluez-vm: BEGIN' "$RESULTS/console.log" 2>/dev/null && exit 0
  done
  echo "the guest did not begin its script within ${BOOT_TIMEOUT}s (hung while booting: $(grep -o 'soft lockup.*' "$RESULTS/console.log" 2>/dev/null | tail -n 1 | tr -d '\r'))" >"$RESULTS/init-error"
  kill "$QPID" 2>/dev/null
) &
WATCHDOG=$!
trap 'kill "$QPID" "$WATCHDOG" 2>/dev/null; wait "$QPID" 2>/dev/null; exit 130' INT TERM
# Stream the script's output (and, with --verbose, the console) while the VM runs.
tail -n +1 -F --pid="$QPID" "$RESULTS/output.log" 2>/dev/null &
TAILS=($!)
if ((VERBOSE)); then
  tail -n +1 -F --pid="$QPID" "$RESULTS/console.log" 2>/dev/null | sed 's/^/[vm] /' >&2 &
  TAILS+=($!)
fi
wait "$QPID"
qrc=$?
kill "$WATCHDOG" 2>/dev/null; wait "$WATCHDOG" 2>/dev/null
wait "${TAILS[@]}" 2>/dev/null
trap - INT TERM
elapsed=$((SECONDS - start))

show_tail() { # FILE LINES
  [[ -s "$1" ]] || return 0
  echo "----- last $2 lines of $1 -----" >&2
  tail -n "$2" "$1" | tr -d '\r' >&2
  echo "-----" >&2
}

if [[ -f "$RESULTS/exit-code" ]]; then
  rc="$(cat "$RESULTS/exit-code")"
  kept="results: $RESULTS"
  ((rc == 0 && KEEP == 0)) && kept="results removed; --keep keeps them"
  echo "$ME: $(basename "$SCRIPT") exited $rc (VM ran ${elapsed}s; $kept)" >&2
elif [[ ! -f "$RESULTS/init-error" ]] && ((qrc == 124 || qrc == 137)); then
  rc=124
  echo "$ME: TIMED OUT: the VM did not finish within ${TIMEOUT}s (results: $RESULTS)" >&2
  show_tail "$RESULTS/setup.log" 20
  show_tail "$RESULTS/console.log" 30
else
  rc=125
  reason="$(cat "$RESULTS/setup-error" "$RESULTS/init-error" 2>/dev/null)"
  echo "$ME: VM FAILED before the script finished (qemu exit $qrc${reason:+; $reason}; results: $RESULTS)" >&2
  show_tail "$RESULTS/qemu.log" 20
  show_tail "$RESULTS/setup.log" 30
  [[ -f "$RESULTS/setup-error" ]] && show_tail "$RESULTS/bluetoothd.log" 10
  show_tail "$RESULTS/console.log" 30
fi
if ((rc == 0 && KEEP == 0)); then
  rm -rf "$RESULTS"
fi
exit "$rc"
