"""bleak helpers for centrals INSIDE the BlueZ test VM (run with $BLUEZ_VM_PYTHON).

    import sys, os; sys.path.insert(0, os.environ["BLUEZ_VM_DIR"])
    from bvm_bleak import find, connected
    dev = await find("00:AA:01:00:00:00")            # scans from hci1
    dev = await find_by_service(UUID, kick="hci0")  # or by advertised service UUID
    dev = await find_by_name("EdgeCoder-...", kick="hci0")   # or by (scan response) name
    async with connected(dev) as client: ...         # connected, services resolved
    await forget(address)                            # bluetoothd drops what it knows
    await advertising_instances("hci0")              # LEAdvertisingManager1.ActiveInstances
    await att_mtu(client)                            # the ATT MTU (bleak's mtu_size then too)

The BlueZ "Connected" race, and what this module does about it: BlueZ (5.66 here, and
still upstream) sets a device's LE "connected" state silently when its own ATT socket
connects (device.c att_connect_cb); when the kernel's mgmt "Device Connected" event is
handled after that, device_add_connection() logs "Device XX is already connected" and
returns WITHOUT emitting PropertiesChanged Connected=true. bleak tracks Connected from
signals, so it believes the device is disconnected and fails with "failed to discover
services, device disconnected". Under TCG this happens in most runs (nearly always with
-smp 1, or with bluetoothd -d / btmon running). Importing this module patches bleak's
BlueZ manager to re-read Connected/ServicesResolved from bluetoothd (Properties.GetAll)
before it waits for service discovery, and afterwards to wait until bleak has seen every
GATT object bluetoothd registered (bluetoothd can emit ServicesResolved before the
services' InterfacesAdded, which left bleak with 0 services). connect() also retries
and insists on MIN_SERVICES services.

Timeouts are generous on purpose: the guest runs under TCG, often niced on a loaded host,
so guest time crawls while its timers follow the host's clock.
"""
import asyncio
import contextlib
import os
import subprocess
import sys

from bleak import BleakClient, BleakScanner
from bleak.exc import BleakError

CENTRAL_ADAPTER = "hci1"


def _patch_bleak_connected_race():
    try:
        from bleak.backends.bluezdbus import defs
        from bleak.backends.bluezdbus.manager import BlueZManager
        from dbus_fast import Message, MessageType
    except ImportError as e:  # another bleak layout: leave it alone
        print(f"# bvm_bleak: not patching bleak: {e!r}", file=sys.stderr)
        return
    original = BlueZManager._wait_for_services_discovery
    if getattr(original, "_bvm_patched", False):
        return

    async def wait_for_services_discovery(self, device_path):
        try:
            reply = await self._bus.call(Message(
                destination=defs.BLUEZ_SERVICE, path=device_path,
                interface="org.freedesktop.DBus.Properties", member="GetAll",
                signature="s", body=[defs.DEVICE_INTERFACE]))
            cached = self._properties.get(device_path, {}).get(defs.DEVICE_INTERFACE)
            if reply.message_type == MessageType.METHOD_RETURN and cached is not None:
                for name in ("Connected", "ServicesResolved"):
                    if name in reply.body[0]:
                        value = reply.body[0][name].value
                        if cached.get(name) != value:
                            print(f"# bvm_bleak: {name} was {cached.get(name)}, bluetoothd says "
                                  f"{value} (BlueZ Connected race)", file=sys.stderr, flush=True)
                        cached[name] = value
        except Exception as e:  # best effort: fall back to bleak's own logic
            print(f"# bvm_bleak: property refresh failed: {e!r}", file=sys.stderr)
        # The same race can leave ServicesResolved=true unsignalled (seen twice in 50
        # connects under load: the ATT discovery done at once, bleak waiting 40 s): while
        # bleak waits, ask bluetoothd every 2 s and go on once it says resolved.
        async def resolved_in_bluetoothd():
            while True:
                await asyncio.sleep(2)
                with contextlib.suppress(Exception):
                    reply = await self._bus.call(Message(
                        destination=defs.BLUEZ_SERVICE, path=device_path,
                        interface="org.freedesktop.DBus.Properties", member="Get",
                        signature="ss", body=[defs.DEVICE_INTERFACE, "ServicesResolved"]))
                    if reply.message_type == MessageType.METHOD_RETURN and reply.body[0].value is True:
                        return
        waiting = asyncio.ensure_future(original(self, device_path))
        polling = asyncio.ensure_future(resolved_in_bluetoothd())
        try:
            done, _ = await asyncio.wait({waiting, polling}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (waiting, polling):
                if not task.done():
                    task.cancel()
        if waiting in done:
            waiting.result()  # bleak's own outcome, its errors included
        else:
            print("# bvm_bleak: ServicesResolved true in bluetoothd without a signal bleak saw "
                  "(BlueZ race); going on", file=sys.stderr, flush=True)
            cached = self._properties.get(device_path, {}).get(defs.DEVICE_INTERFACE)
            if cached is not None:
                cached["ServicesResolved"] = True
        # bluetoothd may emit ServicesResolved before the InterfacesAdded signals of the
        # services (separate idle callbacks): wait until bleak has seen every GATT object
        # that bluetoothd has registered under the device.
        try:
            for _ in range(100):
                reply = await self._bus.call(Message(
                    destination=defs.BLUEZ_SERVICE, path="/",
                    interface="org.freedesktop.DBus.ObjectManager",
                    member="GetManagedObjects"))
                gatt = {path for path, ifaces in reply.body[0].items()
                        if path.startswith(device_path + "/")
                        and any(i.startswith("org.bluez.Gatt") for i in ifaces)}
                missing = gatt - set(self._properties)
                if not missing:
                    break
                await asyncio.sleep(0.1)
            else:
                print(f"# bvm_bleak: bleak still misses {len(missing)} GATT objects",
                      file=sys.stderr, flush=True)
        except Exception as e:
            print(f"# bvm_bleak: GATT object check failed: {e!r}", file=sys.stderr)

    wait_for_services_discovery._bvm_patched = True
    BlueZManager._wait_for_services_discovery = wait_for_services_discovery


_patch_bleak_connected_race()


def log(msg):
    print(f"# {msg}", file=sys.stderr, flush=True)


async def _bluez_objects():
    from dbus_fast import BusType, Message
    from dbus_fast.aio import MessageBus
    bus = await MessageBus(bus_type=BusType.SYSTEM).connect()
    try:
        reply = await bus.call(Message(
            destination="org.bluez", path="/",
            interface="org.freedesktop.DBus.ObjectManager", member="GetManagedObjects"))
        return reply.body[0]
    finally:
        bus.disconnect()


async def _diagnose():
    """Log what bluetoothd knows: adapters (powered, discovering, active advertisements)
    and devices."""
    try:
        objects = await _bluez_objects()
    except Exception as e:
        log(f"  GetManagedObjects failed: {e!r}")
        return
    for path, ifaces in sorted(objects.items()):
        if "org.bluez.Adapter1" in ifaces:
            a = {k: v.value for k, v in ifaces["org.bluez.Adapter1"].items()}
            adv = ifaces.get("org.bluez.LEAdvertisingManager1", {})
            act = adv["ActiveInstances"].value if "ActiveInstances" in adv else "?"
            log(f"  {path} {a.get('Address')} powered={a.get('Powered')} "
                f"discovering={a.get('Discovering')} discoverable={a.get('Discoverable')} "
                f"active_adv_instances={act}")
        elif "org.bluez.Device1" in ifaces:
            d = {k: v.value for k, v in ifaces["org.bluez.Device1"].items()}
            log(f"  {path} connected={d.get('Connected')} rssi={d.get('RSSI')}")


async def _kick_advertising(adapter, delay):
    """Re-enable ADAPTER's legacy advertising (HCI LE Set Advertising Enable off, on):
    btvirt then reports the advertisement to every scanning controller."""
    await asyncio.sleep(delay)
    for enable in ("00", "01"):
        proc = await asyncio.create_subprocess_exec(
            "hcitool", "-i", adapter, "cmd", "0x08", "0x000a", enable,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        await proc.wait()


async def find(address, adapter=CENTRAL_ADAPTER, timeout=90.0, scan_window=3.0,
               kick=None):
    """Scan from ADAPTER until ADDRESS advertises; returns a BLEDevice or None.

    btvirt's emulated controllers send an advertising report only at an edge: when the
    scanner enables scanning, or when the advertiser enables advertising (emulator/btdev.c;
    no periodic reports). The kernel drops the report sent at the scan-enable edge when it
    is handled before the kernel marks its discovery as running (a race between two kernel
    workers); on a loaded host this can go on for a minute and more. So:
    - KICK="hci0" (the advertiser's adapter; default $BVM_KICK_ADAPTER): about a second
      into each scan window, while the advertiser has an active advertisement, its
      advertising is switched off and on again with a raw HCI command (hcitool), an edge
      that reaches the scanner while its discovery is running. Use it whenever the
      peripheral under test runs in this VM.
    - scans run in short windows (each start is another edge) until TIMEOUT.
    - bleak reports a device only on InterfacesAdded or a changed property, and btvirt's
      advertisements never change (not even RSSI), so a device that bluetoothd already
      knows on ADAPTER is returned from bluetoothd's own object.
    """
    from bleak.backends.device import BLEDevice
    kick = kick if kick is not None else os.environ.get("BVM_KICK_ADAPTER") or None
    path = f"/org/bluez/{adapter}/dev_" + address.upper().replace(":", "_")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    scans = 0
    while True:
        kicking = False
        try:
            objects = await _bluez_objects()
            props = objects.get(path, {}).get("org.bluez.Device1")
            if kick:
                adv = objects.get(f"/org/bluez/{kick}", {}).get("org.bluez.LEAdvertisingManager1", {})
                kicking = "ActiveInstances" in adv and adv["ActiveInstances"].value > 0
        except Exception as e:
            log(f"find: GetManagedObjects failed: {e!r}")
            props = None
        if props is not None:
            props = {k: v.value for k, v in props.items()}
            if scans != 1:
                log(f"find: {address} known to bluetoothd after {scans} scan(s)")
            return BLEDevice(address, props.get("Name"), {"path": path, "props": props})
        if loop.time() >= deadline:
            log(f"find: no advertisement from {address} on {adapter} in {scans} scans")
            await _diagnose()
            return None
        if scans == 5:
            log(f"find: {address} not seen in 5 scans; state:")
            await _diagnose()
            if os.environ.get("BVM_BTMON_ON_SLOW_FIND") == "1":
                out = os.path.join(os.environ.get("VM_RESULTS", "/tmp"), "btmon-slow-find.log")
                log(f"find: starting btmon -> {out}")
                subprocess.Popen(["sh", "-c", f"exec stdbuf -oL btmon -T > {out} 2>&1"])
        scans += 1
        kicker = asyncio.create_task(_kick_advertising(kick, min(1.0, scan_window / 3))) \
            if kicking else None
        try:
            dev = await BleakScanner.find_device_by_address(
                address, timeout=scan_window, bluez={"adapter": adapter})
        finally:
            if kicker is not None:
                with contextlib.suppress(BaseException):
                    await kicker
        if dev is not None:
            if scans > 1:
                log(f"find: {address} found on scan {scans}")
            return dev


def _adv_matches(props, service=None, name=None):
    """Whether bluetoothd's Device1 properties (or a bleak advertisement's data, given as
    {"UUIDs": [...], "Name": ...}) advertise SERVICE and/or carry NAME."""
    if service is not None:
        uuids = [str(u).lower() for u in (props.get("UUIDs") or [])]
        if service.lower() not in uuids:
            return False
    if name is not None and props.get("Name") != name and props.get("Alias") != name:
        return False
    return True


async def find_matching(service=None, name=None, adapter=CENTRAL_ADAPTER, timeout=90.0,
                        scan_window=3.0, kick=None, known=True):
    """Like find(), but by advertised SERVICE UUID and/or local NAME instead of an address:
    scans from ADAPTER (with a discovery filter on SERVICE) until a device advertising
    them is reported; returns a BLEDevice or None. KICK as in find(). With KNOWN (default),
    a device that bluetoothd already knows on ADAPTER with matching UUIDs/Name counts
    (bleak reports only changes, and btvirt's advertisements never change); call forget()
    first to insist on a fresh advertisement."""
    from bleak.backends.device import BLEDevice
    kick = kick if kick is not None else os.environ.get("BVM_KICK_ADAPTER") or None
    prefix = f"/org/bluez/{adapter}/dev_"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    scans = 0
    want = f"service={service} name={name}"
    while True:
        kicking = False
        hit = None
        try:
            objects = await _bluez_objects()
            if known:
                for path, ifaces in sorted(objects.items()):
                    if path.startswith(prefix) and "org.bluez.Device1" in ifaces:
                        props = {k: v.value for k, v in ifaces["org.bluez.Device1"].items()}
                        if _adv_matches(props, service, name):
                            hit = BLEDevice(props["Address"], props.get("Name"),
                                            {"path": path, "props": props})
                            break
            if kick:
                adv = objects.get(f"/org/bluez/{kick}", {}).get("org.bluez.LEAdvertisingManager1", {})
                kicking = "ActiveInstances" in adv and adv["ActiveInstances"].value > 0
        except Exception as e:
            log(f"find_matching: GetManagedObjects failed: {e!r}")
        if hit is not None:
            log(f"find_matching({want}): {hit.address} after {scans} scan(s)")
            return hit
        if loop.time() >= deadline:
            log(f"find_matching: nothing advertises {want} on {adapter} in {scans} scans")
            await _diagnose()
            return None
        if scans == 5:
            log(f"find_matching: {want} not seen in 5 scans; state:")
            await _diagnose()
        scans += 1
        kicker = asyncio.create_task(_kick_advertising(kick, min(1.0, scan_window / 3))) \
            if kicking else None
        try:
            def match(dev, adv):
                return _adv_matches({"UUIDs": adv.service_uuids, "Name": adv.local_name},
                                    service, name)
            kwargs = {"service_uuids": [service]} if service else {}
            dev = await BleakScanner.find_device_by_filter(
                match, timeout=scan_window, bluez={"adapter": adapter}, **kwargs)
        finally:
            if kicker is not None:
                with contextlib.suppress(BaseException):
                    await kicker
        if dev is not None:
            log(f"find_matching({want}): {dev.address} found on scan {scans}")
            return dev
        known = True   # bluetoothd may have learnt it during this scan


async def find_by_service(uuid, **kwargs):
    """find_matching(service=UUID, ...)"""
    return await find_matching(service=uuid, **kwargs)


async def find_by_name(name, **kwargs):
    """find_matching(name=NAME, ...): NAME may travel in the scan response."""
    return await find_matching(name=name, **kwargs)


async def forget(address, adapter=CENTRAL_ADAPTER):
    """Adapter1.RemoveDevice: bluetoothd forgets ADDRESS on ADAPTER (disconnecting it),
    so a later scan must see a fresh advertisement. True if it was known."""
    from dbus_fast import BusType, Message, MessageType
    from dbus_fast.aio import MessageBus
    path = f"/org/bluez/{adapter}/dev_" + address.upper().replace(":", "_")
    bus = await MessageBus(bus_type=BusType.SYSTEM).connect()
    try:
        reply = await bus.call(Message(
            destination="org.bluez", path=f"/org/bluez/{adapter}",
            interface="org.bluez.Adapter1", member="RemoveDevice", signature="o", body=[path]))
        return reply.message_type == MessageType.METHOD_RETURN
    finally:
        bus.disconnect()


async def power_cycle(adapter=CENTRAL_ADAPTER):
    """Adapter1.Powered false, then true: the kernel drops every connection and
    connection attempt it holds for ADAPTER, and powering on resets the controller (HCI
    Reset), so btvirt forgets its side too."""
    from dbus_fast import BusType, Message, Variant
    from dbus_fast.aio import MessageBus
    bus = await MessageBus(bus_type=BusType.SYSTEM).connect()
    try:
        for on in (False, True):
            await bus.call(Message(
                destination="org.bluez", path=f"/org/bluez/{adapter}",
                interface="org.freedesktop.DBus.Properties", member="Set", signature="ssv",
                body=["org.bluez.Adapter1", "Powered", Variant("b", on)]))
            await asyncio.sleep(0.5)
    finally:
        bus.disconnect()


async def att_mtu(client):
    """The connection's ATT MTU: bluetoothd's GattCharacteristic1.MTU of the first
    characteristic (BlueZ >= 5.62). bleak's mtu_size says 23 unless _acquire_mtu() ran,
    which AcquireWrite/AcquireNotify would do; this sets it from the property instead
    and returns it (None if unknown)."""
    from dbus_fast import BusType, Message, MessageType
    from dbus_fast.aio import MessageBus
    chars = list(client.services.characteristics.values())
    if not chars:
        return None
    bus = await MessageBus(bus_type=BusType.SYSTEM).connect()
    try:
        reply = await bus.call(Message(
            destination="org.bluez", path=chars[0].obj[0],
            interface="org.freedesktop.DBus.Properties", member="Get", signature="ss",
            body=["org.bluez.GattCharacteristic1", "MTU"]))
        if reply.message_type != MessageType.METHOD_RETURN:
            log(f"att_mtu: {reply.body}")
            return None
        mtu = reply.body[0].value
        with contextlib.suppress(Exception):
            client._backend._mtu_size = mtu
        return mtu
    finally:
        bus.disconnect()


async def advertising_instances(adapter="hci0"):
    """org.bluez.LEAdvertisingManager1.ActiveInstances of ADAPTER (None if unknown)."""
    try:
        objects = await _bluez_objects()
    except Exception as e:
        log(f"advertising_instances: GetManagedObjects failed: {e!r}")
        return None
    adv = objects.get(f"/org/bluez/{adapter}", {}).get("org.bluez.LEAdvertisingManager1", {})
    return adv["ActiveInstances"].value if "ActiveInstances" in adv else None


async def connect(device, adapter=CENTRAL_ADAPTER, attempts=5, timeout=60.0,
                  min_services=1, disconnected_callback=None):
    """A connected BleakClient (services resolved, at least MIN_SERVICES of them).

    Retries the BlueZ 'Connected' signal race described above. Call
    client.disconnect() yourself, or use `async with connected(dev) as client:`.
    DISCONNECTED_CALLBACK is passed to BleakClient.
    """
    last = None
    for attempt in range(1, attempts + 1):
        client = BleakClient(device, disconnected_callback=disconnected_callback,
                             bluez={"adapter": adapter}, timeout=timeout)
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
