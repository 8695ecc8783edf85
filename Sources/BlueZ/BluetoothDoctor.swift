#if canImport(Glibc)
import Glibc
#endif
import Posix
import DBus
import WorkerCore

/// `doctor`'s Bluetooth side: the kernel's controllers, bluetoothd on the system bus and
/// its adapters, the BlueZ version and what it means for clients.
public enum BluetoothDoctor {
    /// The first BlueZ release that accepts written values over 508 bytes from a D-Bus
    /// GATT application's characteristic (EdgeCoder's Mac proxy writes 512).
    public static let longWriteFixedIn = (5, 69)

    public static func report(configuredAdapter: String?) async -> (json: JSONValue, advice: [String]) {
        var advice: [String] = []
        var object = JSONObject()

        switch AdapterDiagnostics.kernelView() {
        case .unsupported(let why):
            object["kernel"] = ["supported": false, "problem": .string(why)]
            advice.append("bluetooth: " + why)
        case .adapters(let adapters):
            object["kernel"] = [
                "supported": true,
                "adapters": .array(
                    adapters.map { adapter in
                        var entry = JSONObject([("name", .string(adapter.name))])
                        entry["address"] = .optional(adapter.address)
                        entry["up"] = adapter.up.map { .bool($0) } ?? .null
                        entry["rfkillSoftBlocked"] = adapter.softBlocked.map { .bool($0) } ?? .null
                        entry["rfkillHardBlocked"] = adapter.hardBlocked.map { .bool($0) } ?? .null
                        return .object(entry)
                    }),
            ]
            if adapters.isEmpty { advice.append("bluetooth: the kernel has no Bluetooth controller (/sys/class/bluetooth is empty)") }
            for adapter in adapters where adapter.softBlocked == true || adapter.hardBlocked == true || adapter.up == false {
                advice.append("bluetooth: " + AdapterDiagnostics.advice(for: adapter.name))
            }
        }

        let (outcome, output) = await HookRunner.capture(
            "for b in /usr/libexec/bluetooth/bluetoothd /usr/sbin/bluetoothd /usr/lib/bluetooth/bluetoothd; do [ -x \"$b\" ] && exec \"$b\" --version; done; exit 127",
            timeoutMs: 3_000, limit: 64)
        let version = outcome.succeeded ? output.split(whereSeparator: { $0 == "\n" || $0 == " " }).first.map(String.init) : nil
        object["bluezVersion"] = .optional(version)
        if let version {
            if let parsed = parseVersion(version), parsed < longWriteFixedIn {
                let note =
                    "BlueZ \(version) refuses written values over 508 bytes before the worker sees them (fixed in BlueZ 5.69): EdgeCoder's Mac proxy, which writes 512-byte values, cannot send requests to this host; clients must write at most 508 bytes per write"
                object["writeLimitBytes"] = 508
                object["writeLimitNote"] = .string(note)
                advice.append("bluetooth: " + note)
            } else {
                object["writeLimitBytes"] = 512
            }
        } else {
            advice.append("bluetooth: bluetoothd is not installed (no bluetoothd binary found): apt-get install bluez")
        }

        // EATT reorders notifications (docs/operating/bluetooth.md, "Pacing"): one ATT bearer keeps them in order.
        let mainConf = BlueZConfigFile.path
        let confText = BlueZConfigFile.text()
        let channels = BlueZMainConf.attChannels(in: confText ?? "")
        object["attBearers"] = .int(Int64(channels))
        if channels > 1 {
            advice.append(
                "bluetooth: bluetoothd may use \(channels) ATT bearers (EATT; [GATT] Channels in \(mainConf)\(confText == nil ? ", not readable here: its default" : "")): it can deliver notifications out of order, so the worker pauses after every chunk, which is slow at small MTUs; set \"Channels = 1\" under [GATT] there and restart bluetooth, then notifications are paced by bytes"
            )
        }

        let bus = probeBus()
        object["bluetoothd"] = bus.json
        if let problem = bus.problem { advice.append("bluetooth: " + problem) }
        if bus.running, let configuredAdapter, !bus.adapters.contains(where: { $0.name == configuredAdapter }) {
            advice.append("bluetooth: " + AdapterDiagnostics.explain(configured: configuredAdapter, known: bus.adapters.map(\.name)))
        }
        if bus.running, configuredAdapter == nil, !bus.adapters.contains(where: \.powered) {
            advice.append("bluetooth: " + AdapterDiagnostics.explain(configured: nil, known: bus.adapters.map(\.name)))
        }
        return (.object(object), advice)
    }

    static func parseVersion(_ text: String) -> (Int, Int)? {
        let parts = text.split(separator: ".")
        guard parts.count >= 2, let major = Int(parts[0]), let minor = Int(parts[1]) else { return nil }
        return (major, minor)
    }

    struct BusProbe {
        var running = false
        var owner: String?
        var adapters: [BlueZObjects.Adapter] = []
        var problem: String?

        var json: JSONValue {
            var object = JSONObject([("running", .bool(running))])
            object["owner"] = .optional(owner)
            object["adapters"] = .array(
                adapters.map { adapter in
                    var entry = JSONObject([("name", .string(adapter.name))])
                    entry["address"] = .optional(adapter.address)
                    entry["powered"] = .bool(adapter.powered)
                    entry["leAdvertising"] = .bool(adapter.canAdvertise)
                    return .object(entry)
                })
            object["problem"] = .optional(problem)
            return .object(object)
        }
    }

    /// Asks the system bus whether bluetoothd runs and what adapters it has, waiting
    /// up to two seconds (a one-shot command, so it may block).
    static func probeBus() -> BusProbe {
        var probe = BusProbe()
        let bus: Bus
        do { bus = try Bus.system() } catch {
            probe.problem = "cannot use the system bus (\(error)): is dbus running? (systemctl status dbus)"
            return probe
        }
        var owner: Result<[DBusValue], DBusError>?
        var objects: Result<[DBusValue], DBusError>?
        do {
            try bus.call(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                member: "GetNameOwner", arguments: [.string("org.bluez")], timeoutUsec: 2_000_000
            ) { owner = $0 }
            try bus.call(
                destination: "org.bluez", path: "/", interface: "org.freedesktop.DBus.ObjectManager",
                member: "GetManagedObjects", timeoutUsec: 2_000_000
            ) { objects = $0 }
            let clock = SystemClock()
            let deadline = clock.monotonicMs() + 2_500
            while (owner == nil || objects == nil) && clock.monotonicMs() < deadline {
                while try bus.process() {}
                var descriptor = pollfd(fd: bus.fileDescriptor, events: bus.events, revents: 0)
                _ = poll(&descriptor, 1, 50)
            }
        } catch {
            probe.problem = "the system bus failed: \(error)"
            return probe
        }
        guard case .success(let args)? = owner, let name = args.first?.stringValue else {
            probe.problem = "bluetoothd is not running (org.bluez is not on the system bus): systemctl start bluetooth"
            return probe
        }
        probe.running = true
        probe.owner = name
        if case .success(let args)? = objects {
            probe.adapters = BlueZObjects(managedObjects: args.first).adapters.values.sorted { $0.name < $1.name }
        } else if case .failure(let error)? = objects {
            probe.problem = "bluetoothd did not list its objects: \(error)"
        }
        return probe
    }
}
