#!/bin/bash
# Runs INSIDE the BlueZ test VM for host-port-smoke.sh.
source "$BLUEZ_VM_DIR/guest-lib.sh"
url="http://$BLUEZ_VM_HOST_ADDR:$PORT"
check "BLUEZ_VM_HOST_ADDR is set ($BLUEZ_VM_HOST_ADDR), ports: $BLUEZ_VM_HOST_PORTS" \
  test -n "$BLUEZ_VM_HOST_ADDR" -a "$BLUEZ_VM_HOST_PORTS" = "$PORT"
got="$(curl -sS --max-time 30 "$url/hello.txt")"
check "curl $url/hello.txt gets the host's file" test "$got" = "$WANT_HELLO"
n=0
for _ in 1 2 3 4 5; do
  [[ "$(curl -sS --max-time 30 "$url/hello.txt")" == "$WANT_HELLO" ]] && n=$((n + 1))
done
check "five more connections in a row ($n/5)" test $n -eq 5
sum="$(curl -sS --max-time 60 "$url/big.bin" | sha256sum | cut -c1-64)"
check "1 MiB body arrives intact" test "$sum" = "$WANT_SUM"
check "restrict=on: the host's other addresses are not reachable (10.0.2.2:$PORT)" \
  bash -c "! curl -sS --max-time 5 http://10.0.2.2:$PORT/hello.txt"
check "three controllers (--controllers 3)" test "$(find /sys/class/bluetooth -mindepth 1 -maxdepth 1 -name 'hci*' | wc -l)" -eq 3
info="$(btmgmt_run info)"
check "hci2 has address $HCI2_ADDR" grep -q "addr $HCI2_ADDR" <<<"$info"
tap_done
