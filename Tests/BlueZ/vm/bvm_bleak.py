"""bleak helpers for centrals INSIDE the BlueZ test VM (run with $BLUEZ_VM_PYTHON).

    import sys, os; sys.path.insert(0, os.environ["BLUEZ_VM_DIR"])
    from bvm_bleak import find, connected
    dev = await find("00:AA:01:00:00:00")            # scans from hci1
    async with connected(dev) as client: ...         # connected, services resolved

Why connect() retries: BlueZ (5.66 here, still upstream) sets a device's LE "connected"
state silently when its own ATT socket connects first (device.c att_connect_cb); when the
kernel's mgmt "Device Connected" event then arrives, device_add_connection() logs
"Device XX is already connected" and returns without emitting PropertiesChanged
Connected=true. bleak, which tracks Connected from signals, then sees the device as
disconnected and fails with "failed to discover services, device disconnected" (or finds
no services). Under TCG this happens often (with -smp 1 nearly always). A fresh attempt
usually wins the race.
"""
import asyncio
import contextlib
import sys

from bleak import BleakClient, BleakScanner
from bleak.exc import BleakError

CENTRAL_ADAPTER = "hci1"


def log(msg):
    print(f"# {msg}", file=sys.stderr, flush=True)


async def find(address, adapter=CENTRAL_ADAPTER, timeout=30.0):
    """Scan from ADAPTER until ADDRESS advertises; returns a BLEDevice or None."""
    return await BleakScanner.find_device_by_address(
        address, timeout=timeout, bluez={"adapter": adapter})


async def connect(device, adapter=CENTRAL_ADAPTER, attempts=5, timeout=30.0,
                  min_services=1):
    """A connected BleakClient (services resolved, at least MIN_SERVICES of them).

    Retries the BlueZ 'Connected' signal race described above. Call
    client.disconnect() yourself, or use `async with connected(dev) as client:`.
    """
    last = None
    for attempt in range(1, attempts + 1):
        client = BleakClient(device, bluez={"adapter": adapter}, timeout=timeout)
        try:
            await client.connect()
            n = len(list(client.services))
            if n >= min_services:
                if attempt > 1:
                    log(f"connected on attempt {attempt}")
                return client
            last = BleakError(f"connected but only {n} services")
            await client.disconnect()
        except (BleakError, asyncio.TimeoutError, EOFError) as e:
            last = e
        log(f"connect attempt {attempt}/{attempts} failed: {last!r}")
        await asyncio.sleep(1.0)
        if isinstance(device, str) or attempt == attempts:
            continue
        # the device object may have gone stale while disconnected: scan again
        again = await find(getattr(device, "address", device), adapter, timeout=15)
        if again is not None:
            device = again
    raise BleakError(f"could not connect after {attempts} attempts: {last!r}")


@contextlib.asynccontextmanager
async def connected(device, **kwargs):
    """`async with connected(dev) as client:` -- connect() and disconnect at the end."""
    client = await connect(device, **kwargs)
    try:
        yield client
    finally:
        with contextlib.suppress(Exception):
            await client.disconnect()
