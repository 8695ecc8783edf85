#!/bin/bash
# Runs INSIDE the BlueZ test VM (see smoke.sh): two controllers, BlueZ's example GATT
# server + advertisement on hci0, bleak from hci1 finds 00:AA:01:00:00:00 and lists its
# services. Prints "ok - ..." / "not ok - ..." lines; exits non-zero on any failure.
source "$BLUEZ_VM_DIR/guest-lib.sh"

# 1. two controllers with the expected addresses
info="$(btmgmt_run info)"
printf '%s\n' "$info" | sed 's/^/# /'
n=$(grep -c '^hci[0-9]*:' <<<"$info")
if [[ $n -eq 2 ]] && grep -q "addr $HCI0_ADDR" <<<"$info" && grep -q "addr $HCI1_ADDR" <<<"$info"; then
  ok "btmgmt info shows two controllers ($HCI0_ADDR, $HCI1_ADDR)"
else
  not_ok "btmgmt info shows two controllers (saw $n)"
fi

# 2. example GATT server + advertisement on hci0
start_example() { # NAME LOG REGEX
  local py
  py="$(bluez_example "$1" hci0)" || return 1
  /usr/bin/python3 -u "$py" >"$VM_RESULTS/$2" 2>&1 &
  local pid=$! end=$((SECONDS + 90))   # python starts slowly under TCG on a busy host
  until grep -qE "$3" "$VM_RESULTS/$2"; do
    if ! kill -0 $pid 2>/dev/null || ((SECONDS >= end)); then
      sed 's/^/# /' "$VM_RESULTS/$2"; return 1
    fi
    sleep 0.2
  done
}
check "example-gatt-server registered on hci0" \
  start_example example-gatt-server gatt-server.log '^GATT application registered'
check "example-advertisement registered on hci0" \
  start_example example-advertisement advertisement.log '^Advertisement registered'

# 3. bleak (venv, through bluetoothd) from hci1
central() {
  "$BLUEZ_VM_PYTHON" - "$HCI0_ADDR" <<'PY'
import asyncio, os, sys
from importlib.metadata import version
sys.path.insert(0, os.environ["BLUEZ_VM_DIR"])
from bvm_bleak import find, connected

ADDR = sys.argv[1]
WANT = {
    "0000180d-0000-1000-8000-00805f9b34fb": "Heart Rate",
    "0000180f-0000-1000-8000-00805f9b34fb": "Battery",
    "12345678-1234-5678-1234-56789abcdef0": "example test service",
}
BATTERY_LEVEL = "00002a19-0000-1000-8000-00805f9b34fb"
TEST_CHRC = "12345678-1234-5678-1234-56789abcdef1"

async def main():
    fails = 0
    def ok(cond, desc):
        nonlocal fails
        fails += 0 if cond else 1
        print(("ok - " if cond else "not ok - ") + desc, flush=True)
    dev = await find(ADDR, kick="hci0")
    ok(dev is not None, f"bleak {version('bleak')} on hci1 finds {ADDR}")
    if dev is None:
        return 1
    async with connected(dev, min_services=3) as client:
        ok(client.is_connected, f"connected to {ADDR} from hci1")
        for s in client.services:
            print(f"# service {s.uuid} ({s.description}): " +
                  ", ".join(c.uuid for c in s.characteristics))
        found = {s.uuid for s in client.services}
        for uuid, name in WANT.items():
            ok(uuid in found, f"service {name} ({uuid}) listed")
        level = await client.read_gatt_char(BATTERY_LEVEL)
        ok(len(level) == 1 and 0 <= level[0] <= 100, f"battery level read: {list(level)}")
        data = bytes(range(20))
        await client.write_gatt_char(TEST_CHRC, data, response=True)
        back = await client.read_gatt_char(TEST_CHRC)
        ok(bytes(back) == data, "test characteristic write/read round trip (20 bytes)")
    return 1 if fails else 0

sys.exit(asyncio.run(asyncio.wait_for(main(), 120)))
PY
}
run_tap "bleak central on hci1" central

tap_done
