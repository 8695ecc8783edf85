#!/usr/bin/env bash
# Host-side check of run-in-vm.sh --host-port and --controllers: a python http.server on
# the host's loopback, fetched from the guest with curl through $BLUEZ_VM_HOST_ADDR (also
# several connections, and a 1 MiB body); restrict=on keeps everything else out of
# reach; --controllers 3 gives hci0..hci2.
#   IntegrationTests/bluez/vm/host-port-smoke.sh [run-in-vm.sh options]
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
"$HERE/prepare.sh"
www="$(mktemp -d)"
trap 'kill "$srv" 2>/dev/null; rm -rf "$www"' EXIT
echo "hello from the host $$" >"$www/hello.txt"
head -c 1048576 /dev/urandom >"$www/big.bin"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 -m http.server --bind 127.0.0.1 --directory "$www" "$port" >/dev/null 2>&1 &
srv=$!
for _ in $(seq 50); do curl -sf -o /dev/null "http://127.0.0.1:$port/hello.txt" && break; sleep 0.1; done
"$HERE/run-in-vm.sh" --host-port "$port" --controllers 3 \
  --env "WANT_HELLO=$(cat "$www/hello.txt")" --env "WANT_SUM=$(sha256sum <"$www/big.bin" | cut -c1-64)" \
  --env "PORT=$port" "$@" "$HERE/host-port-guest.sh"
