/// The proxy's link to a worker (protocol-bluetooth §1, the central's side) as a state machine: scan,
/// connect to the named or strongest worker, subscribe to its notified characteristics,
/// write requests in chunks, match responses by id, reconnect with backoff. Events in,
/// commands out; `GattCentral` reads the bus and executes the commands. Every request's
/// deadline lives here and expires on `.tick`, so nothing waits in a task of its own.
public struct CentralMachine: Sendable {
    public struct Settings: Sendable, Equatable {
        /// The local adapter (`hci1`), else the first powered one.
        public var adapter: String?
        /// The worker's address (upper case); else the strongest worker found by a scan.
        public var device: String?
        /// How long a scan collects workers before choosing the strongest.
        public var scanWindowMs: Int64 = 2_500
        public var connectTimeoutMs: Int64 = 30_000
        public var maxBackoffMs: Int64 = 30_000
        /// Link upkeep (property re-reads while connecting) runs this often.
        public var housekeepingMs: Int64 = 500
        /// Without `device`: the first worker connected to becomes the only one (`.pinned`
        /// tells the interpreter, which remembers it for the next run).
        public var pinFirstWorker = false
        /// How the worker is chosen, as `status.selection` says (`remembered`, `device`, `any`).
        public var selection: String?
        /// `proxy --list`: scan for `scanWindowMs`, report every worker in range
        /// (`.listed`) and connect to none.
        public var listOnly = false

        public init(adapter: String?, device: String?) {
            self.adapter = adapter
            self.device = device?.uppercased()
        }
    }

    public enum Event: Sendable, Equatable {
        case busOpened
        case busClosed(reason: String)
        case bluez(BlueZSignal)
        case discoveryFailed(error: String, inProgress: Bool)
        case connectAnswered(device: String, error: String?)
        /// The answer to `.refreshDevice`.
        case deviceProperties(device: String, BlueZInterfaces.Device)
        case subscribeAnswered(path: String, error: String?)
        /// The answer to `.acquireNotify`: nil when the socket is ours (notifications then
        /// come as `.notification`), else the error (StartNotify is used instead).
        case notifyAcquired(path: String, error: String?)
        /// One notification's value, read from the acquired socket.
        case notification(path: String, [UInt8])
        /// bluetoothd closed the acquired socket (the link went down, or it released it).
        case notifySocketClosed(path: String)
        case mtuRead(Int)
        case statusRead([UInt8])
        case writeAnswered(id: String, error: String?)
        /// A request from the HTTP side: its id, its JSON bytes, how long it may take.
        case request(id: String, bytes: [UInt8], timeoutMs: Int64)
        /// The HTTP side no longer waits for it (its task was cancelled): it resolves now as
        /// `notConnected(abandonedReason)`, and the worker is told to stop it (protocol-bluetooth §2's cancel) once the request
        /// has reached it; a request still waiting to be written is simply dropped.
        case abandon(id: String)
        case tick
        /// The proxy stops: every request waiting fails now.
        case stop
    }

    public enum Command: Sendable, Equatable {
        case loadObjects
        case startDiscovery(adapterPath: String)
        case stopDiscovery(adapterPath: String)
        case connect(device: String, timeoutMs: Int64)
        case disconnect(device: String)
        /// Re-read the device's properties (bluetoothd 5.66 can drop the Connected signal).
        case refreshDevice(String)
        case startNotify(path: String)
        /// AcquireNotify: the response characteristic's notifications on a socket of their
        /// own, straight from bluetoothd, instead of a D-Bus signal each (two processes and
        /// two encodings fewer for every piece of an answer). Answered `.notifyAcquired`.
        case acquireNotify(path: String)
        /// Close the acquired socket, if there is one (the link is gone or the proxy stops).
        case releaseNotify
        case readMTU(path: String)
        case readStatus(path: String)
        /// A write with response of one chunk; answer with `.writeAnswered`.
        case write(id: String, path: String, chunk: [UInt8])
        /// A partial message's text (protocol-bluetooth §2), for the HTTP side, in the order received.
        case partial(id: String, String)
        /// The request's result, for the HTTP side.
        case resolve(id: String, GenerateResult)
        case log(MachineLogLevel, String)
        /// The worker at this address is now the only one used (`pinFirstWorker`).
        case pinned(address: String)
        /// `listOnly`: the workers the scan found, strongest first.
        case listed([Sighting])
    }

    /// A worker seen by a scan: its address, the name it advertises, its signal.
    public struct Sighting: Sendable, Equatable {
        public var address: String
        public var name: String?
        public var rssi: Int?
        /// Already connected to this adapter (bluetoothd then reports no RSSI).
        public var connected: Bool

        public init(address: String, name: String?, rssi: Int?, connected: Bool) {
            self.address = address
            self.name = name
            self.rssi = rssi
            self.connected = connected
        }
    }

    /// An abandoned request's result: no one but a stopping proxy reads it, and there it
    /// means the service is going away (503), so it is `notConnected`.
    public static let abandonedReason = "cancelled: the caller stopped waiting (its HTTP client left, or the proxy is stopping)"

    /// The most of a streamed answer kept for its result's `output` (the deltas themselves
    /// all go to the caller): a worker's `backend.maxOutputBytes` is at most 16 MiB.
    public static let maxStreamedOutputBytes = 16 << 20

    public let settings: Settings
    public private(set) var follower = BlueZFollower()
    public private(set) var busOpen = false
    public private(set) var link = Link.idle
    public private(set) var status = ProxyStatus()
    /// Set while `status.problem` is one of the host's setup problems.
    public private(set) var setupProblem: BluetoothSetupProblem?
    var adapterPath: String?
    var scan = Scan()
    var reconnection: Reconnection
    var housekeepingDueAtMs: Int64 = 0
    var lastNowMs: Int64 = 0
    var responseFramer = JSONObjectFramer(maxBytes: 4 << 20, idleDropMs: 30_000)
    var statusFramer = JSONObjectFramer(maxBytes: 4_096, idleDropMs: 30_000)
    var requests = Requests()
    /// The only worker's address (upper case): `settings.device`, or the first one
    /// connected to with `pinFirstWorker`.
    public private(set) var pinned: String?

    public init(settings: Settings, seed: UInt64) {
        self.settings = settings
        reconnection = Reconnection(maxBackoffMs: settings.maxBackoffMs, seed: seed)
        status.adapter = settings.adapter
        pinned = settings.device
        status.selection = settings.selection
        status.pinnedDevice = pinned
    }

    /// The link's phase, without its data.
    public var phase: Phase { link.phase }

    /// Requests waiting for an answer.
    public var inFlight: Int { requests.pending.count }

    /// When the interpreter must feed `.tick` next (monotonic ms): only deadlines after
    /// the last event's time count (one that has passed was handled then).
    public var nextDeadlineMs: Int64 {
        var deadline = housekeepingDueAtMs
        func consider(_ time: Int64) { if time > lastNowMs { deadline = min(deadline, time) } }
        for request in requests.pending.values { consider(request.deadlineMs) }
        if link == .idle { consider(reconnection.nextAttemptAtMs) }
        if let since = scan.sinceMs { consider(since + settings.scanWindowMs) }
        if let linkDeadline = link.deadlineMs { consider(linkDeadline + 1) }
        return max(deadline, lastNowMs + 1)
    }

    // MARK: Events

    public mutating func on(_ event: Event, now: Int64) -> [Command] {
        lastNowMs = max(lastNowMs, now)
        var out: [Command] = []
        switch event {
        case .busOpened:
            busOpen = true
        case .busClosed(let reason):
            busOpen = false
            bluezGone(now: now, &out)
            follower = BlueZFollower()
            status.problem = reason
        case .bluez(let signal):
            if case .characteristicValue(let path, let bytes) = signal {
                if path == link.characteristics[.response] {
                    responseChunk(bytes, now: now, &out)
                } else if path == link.characteristics[.status] {
                    statusChunk(bytes, now: now)
                }
            }
            for fact in follower.apply(signal) { apply(fact, now: now, &out) }
            if case .owner = signal, !follower.present { bluezGone(now: now, &out) }
        case .discoveryFailed(let error, let inProgress):
            if !inProgress {
                out.append(.log(.warning, "cannot start discovery: \(error)"))
                scan.discoveryStarted = false
            }
        case .connectAnswered(let device, let error):
            guard case .connecting(device, let deadlineMs) = link else { break }
            if let error {
                fail("cannot connect to \(follower.objects.address(of: device)): \(error)", now: now, &out)
            } else {
                link = .resolving(device: device, deadlineMs: deadlineMs)
                out.append(.refreshDevice(device))
            }
        case .deviceProperties(let device, let properties):
            guard var known = follower.objects.devices[device] else { break }
            BlueZObjects.update(&known, with: properties)
            follower.objects.devices[device] = known
            if known.servicesResolved && follower.objects.workerCharacteristics(of: device) == nil { out.append(.loadObjects) }
        case .subscribeAnswered(let path, let error):
            guard phase == .subscribing else { break }
            if let error { fail("cannot subscribe to \(path): \(error)", now: now, &out); break }
            markSubscribed(path, now: now, &out)
        case .notifyAcquired(let path, let error):
            guard phase == .subscribing, path == link.characteristics[.response] else {
                // A late answer (the link went meanwhile): its socket is not wanted.
                if error == nil { out.append(.releaseNotify) }
                break
            }
            if let error {
                // Another program on this host subscribed first, or an older bluetoothd:
                // the signal path works everywhere.
                out.append(.log(.info, "AcquireNotify refused (\(error)): notifications by D-Bus signal instead"))
                out.append(.startNotify(path: path))
                break
            }
            out.append(.log(.info, "the worker's answers come on an acquired socket (AcquireNotify)"))
            markSubscribed(path, now: now, &out)
        case .notification(let path, let bytes):
            guard phase == .subscribing || phase == .connected else { break }
            if path == link.characteristics[.response] {
                responseChunk(bytes, now: now, &out)
            } else if path == link.characteristics[.status] {
                statusChunk(bytes, now: now)
            }
        case .notifySocketClosed(let path):
            guard phase == .subscribing || phase == .connected, path == link.characteristics[.response] else { break }
            fail("bluetoothd closed the worker's notification socket", now: now, &out)
        case .mtuRead(let mtu):
            if (23...517).contains(mtu) { status.mtu = mtu }
        case .statusRead(let bytes):
            if let json = try? JSON.parse(bytes) { applyStatus(json) }
        case .writeAnswered(let id, let error):
            writeAnswered(id: id, error: error, now: now, &out)
        case .request(let id, let bytes, let timeoutMs):
            guard case .connected(_, let characteristics) = link, characteristics[.request] != nil else {
                out.append(
                    .resolve(
                        id: id, .notConnected("no worker connected: " + (status.problem ?? "scanning for \(BluetoothUUID.localName(agentID: "…"))"))))
                break
            }
            requests.add(id: id, bytes: bytes, timeoutMs: timeoutMs, now: now)
        case .abandon(let id):
            abandon(id: id, &out)
        case .tick:
            break
        case .stop:
            out.append(.releaseNotify)
            for id in requests.removeAll(keepingWriteUnderWay: true) { out.append(.resolve(id: id, .notConnected("the proxy is stopping"))) }
        }
        expire(now: now, &out)
        if now >= housekeepingDueAtMs {
            housekeepingDueAtMs = now + settings.housekeepingMs
            switch link {
            case .connecting(let device, _), .resolving(let device, _): out.append(.refreshDevice(device))
            case .idle, .subscribing, .connected: break
            }
        }
        advance(now: now, &out)
        pumpWrites(&out)
        status.requestsInFlight = requests.pending.count
        return out
    }

    mutating func apply(_ fact: BlueZFollower.Fact, now: Int64, _ out: inout [Command]) {
        switch fact {
        case .appeared:
            out.append(.loadObjects)
        case .gone:
            bluezGone(now: now, &out)
        case .loaded, .deviceConnected, .deviceChanged, .adapterRemoved:
            break
        case .deviceDisconnected(let path):
            if path == link.device { linkLost("the worker disconnected", now: now, &out) }
        case .deviceRemoved(let path):
            if path == link.device { linkLost("the worker's device object was removed", now: now, &out) }
        case .remoteObjectsRemoved(let path):
            // The worker's daemon stopped or left mode bluetooth: bluetoothd saw its
            // service go (Service Changed) while the link itself may stay up.
            if link.characteristics.values.contains(path) {
                fail("the worker's service went away (its daemon stopped or left mode bluetooth)", now: now, &out)
            }
        case .adapterPowered(let path, let powered):
            if path == adapterPath, !powered { linkLost("adapter powered off", now: now, &out) }
        case .adapterDiscovering(let path, let discovering):
            if path == adapterPath {
                out.append(.log(.debug, "discovery \(discovering ? "on" : "off") on \(path)"))
                if !discovering { scan.discoveryStarted = false }
            }
        case .adapterDiscoverable:
            break
        }
    }

    mutating func bluezGone(now: Int64, _ out: inout [Command]) {
        linkLost("bluetoothd is not running (org.bluez is not on the system bus): systemctl start bluetooth", now: now, &out)
        scan.discoveryStarted = false
        scan.sinceMs = nil
        status.scanning = false
    }

    // MARK: Finding and connecting

    /// Moves the link toward connected, one step at a time.
    mutating func advance(now: Int64, _ out: inout [Command]) {
        guard busOpen, follower.present else { return }
        guard let (path, adapter) = follower.objects.choose(configured: settings.adapter) else {
            return waiting(for: .noAdapter(configured: settings.adapter, known: follower.objects.adapters.values.map(\.name).sorted()))
        }
        adapterPath = path
        status.adapter = adapter.name
        guard adapter.powered else { return waiting(for: .poweredOff(adapter: adapter.name)) }
        if setupProblem != nil {
            setupProblem = nil
            status.problem = nil
        }
        switch link {
        case .connected(let device, _):
            if follower.objects.devices[device]?.connected == false {
                linkLost("the worker disconnected", now: now, &out)
            } else if let rssi = follower.objects.devices[device]?.rssi {
                status.rssi = rssi
            }
        case .connecting(let device, let deadlineMs), .resolving(let device, let deadlineMs), .subscribing(let device, let deadlineMs, _, _):
            if now > deadlineMs {
                fail("connecting to \(status.deviceAddress ?? "?") took over \(settings.connectTimeoutMs) ms", now: now, &out)
                return
            }
            if phase == .resolving, follower.objects.devices[device]?.servicesResolved == true,
                let found = follower.objects.workerCharacteristics(of: device)
            {
                subscribe(found, device: device, deadlineMs: deadlineMs, &out)
            }
        case .idle where settings.listOnly:
            guard !scan.listed else { return }
            guard let since = scan.sinceMs, now - since >= settings.scanWindowMs else { return startDiscovery(adapterPath: path, now: now, &out) }
            scan.listed = true
            // In range: heard in this scan (an RSSI) or linked now; a device bluetoothd only
            // remembers from an earlier scan has neither.
            let found = follower.objects.devices.values
                .filter { $0.adapter == path && $0.uuids.contains(GattLayout.serviceUUID) && ($0.rssi != nil || $0.connected) }
                .map { Sighting(address: $0.address.uppercased(), name: $0.name, rssi: $0.rssi, connected: $0.connected) }
                .sorted { ($0.rssi ?? -999, $1.address) > ($1.rssi ?? -999, $0.address) }
            stopDiscovery(&out)
            out.append(.listed(found))
        case .idle:
            guard now >= reconnection.nextAttemptAtMs else { return }
            let candidates = follower.objects.devices.filter { entry in
                entry.value.adapter == path
                    && (pinned.map { entry.value.address.uppercased() == $0 }
                        ?? (entry.value.uuids.contains(GattLayout.serviceUUID) && entry.value.rssi != nil))
            }
            let windowOver = scan.sinceMs.map { now - $0 >= settings.scanWindowMs } ?? false
            if let best = candidates.max(by: { ($0.value.rssi ?? -999, $1.key) < ($1.value.rssi ?? -999, $0.key) }),
                pinned != nil || windowOver || best.value.connected
            {
                connect(best.key, best.value, now: now, &out)
            } else {
                startDiscovery(adapterPath: path, now: now, &out)
            }
        }
    }

    mutating func waiting(for problem: BluetoothSetupProblem) {
        status.problem = problem.summary
        setupProblem = problem
    }

    mutating func startDiscovery(adapterPath: String, now: Int64, _ out: inout [Command]) {
        if scan.sinceMs == nil { scan.sinceMs = now }
        status.scanning = true
        if status.problem == nil || !status.connected { status.problem = "scanning for a worker (service \(GattLayout.serviceUUID))" }
        guard !scan.discoveryStarted else { return }
        scan.discoveryStarted = true
        out.append(.startDiscovery(adapterPath: adapterPath))
    }

    mutating func stopDiscovery(_ out: inout [Command]) {
        guard scan.discoveryStarted, let adapterPath else { return }
        scan.discoveryStarted = false
        scan.sinceMs = nil
        status.scanning = false
        out.append(.stopDiscovery(adapterPath: adapterPath))
    }

    mutating func connect(_ path: String, _ device: BlueZObjects.Device, now: Int64, _ out: inout [Command]) {
        stopDiscovery(&out)
        link = .connecting(device: path, deadlineMs: now + settings.connectTimeoutMs)
        status.deviceAddress = device.address
        status.deviceName = device.name
        status.rssi = device.rssi
        status.problem = "connecting to \(device.name ?? device.address)"
        out.append(.log(.info, "connecting to \(device.name ?? "?") (\(device.address), RSSI \(device.rssi.map(String.init) ?? "?"))"))
        out.append(.connect(device: path, timeoutMs: settings.connectTimeoutMs))
    }

    mutating func subscribe(_ found: (paths: [GattLayout.Role: String], mtu: Int?), device: String, deadlineMs: Int64, _ out: inout [Command]) {
        link = .subscribing(device: device, deadlineMs: deadlineMs, characteristics: found.paths, subscribed: [])
        status.mtu = found.mtu
        responseFramer.reset()
        statusFramer.reset()
        for characteristic in GattLayout.notified {
            guard let path = found.paths[characteristic.role] else { continue }
            out.append(characteristic.role == .response ? .acquireNotify(path: path) : .startNotify(path: path))
        }
    }

    mutating func markSubscribed(_ path: String, now: Int64, _ out: inout [Command]) {
        guard case .subscribing(let device, let deadlineMs, let characteristics, var subscribed) = link else { return }
        subscribed.insert(path)
        if subscribed.count == GattLayout.notified.count {
            link = .connected(device: device, characteristics: characteristics)
            connected(now: now, &out)
        } else {
            link = .subscribing(device: device, deadlineMs: deadlineMs, characteristics: characteristics, subscribed: subscribed)
        }
    }

    mutating func connected(now: Int64, _ out: inout [Command]) {
        status.connected = true
        status.problem = nil
        status.lastSeenMs = now
        reconnection.connected()
        if settings.pinFirstWorker, pinned == nil, let address = status.deviceAddress?.uppercased() {
            pinned = address
            status.pinnedDevice = address
            out.append(.pinned(address: address))
        }
        out.append(
            .log(
                .notice,
                "connected to the worker \(status.deviceName ?? "?") (\(status.deviceAddress ?? "?")), MTU \(status.mtu.map(String.init) ?? "?")"))
        // The ATT MTU sets the write size; bluetoothd knows it once the link is up.
        if let path = link.characteristics[.request] { out.append(.readMTU(path: path)) }
        // The status characteristic's current value, without waiting for a notification.
        if let path = link.characteristics[.status] { out.append(.readStatus(path: path)) }
    }

    mutating func fail(_ reason: String, now: Int64, _ out: inout [Command]) {
        out.append(.log(.warning, reason + "; retrying in \(reconnection.nextPauseCeilingMs) ms"))
        if let device = link.device { out.append(.disconnect(device: device)) }
        linkLost(reason, now: now, &out)
    }

    /// The link is gone: requests waiting for an answer fail now (their notifications
    /// cannot arrive any more); the next attempt waits the backoff.
    mutating func linkLost(_ reason: String, now: Int64, _ out: inout [Command]) {
        let wasConnected = phase == .connected
        if link != .idle { reconnection.failed(now: now) }
        link = .idle
        out.append(.releaseNotify)
        status.connected = false
        status.problem = reason
        if wasConnected {
            status.reconnects += 1
            out.append(.log(.warning, "lost the worker: \(reason)"))
        }
        for id in requests.removeAll(keepingWriteUnderWay: false) {
            out.append(.resolve(id: id, .answered(ok: false, output: "", error: "link_lost: \(reason)", workerDurationMs: 0)))
        }
    }

    // MARK: Requests out, responses in

    mutating func expire(now: Int64, _ out: inout [Command]) {
        for request in requests.removeExpired(now: now) { out.append(.resolve(id: request.id, .timedOut(request.timeoutMs))) }
    }

    /// The write size: min(MTU − 3, 508), 508 being the largest value bluetoothd before
    /// 5.69 accepts.
    public var chunkSize: Int { max(20, min((status.mtu ?? 23) - 3, 508)) }

    /// Writes the next chunk, if its turn came (`Requests`), to a connected link's request characteristic.
    mutating func pumpWrites(_ out: inout [Command]) {
        let path: String? = if case .connected(_, let characteristics) = link { characteristics[.request] } else { nil }
        if let write = requests.nextWrite(chunkSize: chunkSize, path: path) { out.append(write) }
    }

    mutating func writeAnswered(id: String, error: String?, now: Int64, _ out: inout [Command]) {
        guard requests.writeAnswered(id: id, failed: error != nil), let error else { return }
        if requests.pending.removeValue(forKey: id) != nil {
            out.append(.resolve(id: id, .answered(ok: false, output: "", error: "write_failed: \(error)", workerDurationMs: 0)))
        }
        // A write the worker's side refuses means the link or its service is not
        // what we think: start over with a fresh connection.
        if phase == .connected { fail("a write to the worker failed: \(error)", now: now, &out) }
    }

    mutating func responseChunk(_ bytes: [UInt8], now: Int64, _ out: inout [Command]) {
        status.lastSeenMs = now
        for event in responseFramer.feed(bytes, nowMs: now) {
            guard case .object(let object) = event, let json = try? JSON.parse(object), let id = json["id"]?.stringValue,
                requests.pending[id] != nil
            else { continue }
            // A partial (protocol-bluetooth §2) carries text; the final (`done: true`) or protocol-bluetooth §1's
            // response (with `output`) ends the request.
            if json["done"] == .bool(false) {
                if let delta = json["delta"]?.stringValue, !delta.isEmpty {
                    if requests.pending[id]!.streamed.utf8.count + delta.utf8.count <= Self.maxStreamedOutputBytes {
                        requests.pending[id]!.streamed += delta
                    }
                    out.append(.partial(id: id, delta))
                }
                continue
            }
            let streamed = requests.pending.removeValue(forKey: id)?.streamed ?? ""
            out.append(
                .resolve(
                    id: id,
                    .answered(
                        ok: json["ok"]?.boolValue ?? false, output: json["output"]?.stringValue ?? streamed,
                        error: json["error"]?.stringValue, workerDurationMs: json["durationMs"]?.intValue ?? 0)))
        }
    }

    mutating func abandon(id: String, _ out: inout [Command]) {
        guard requests.pending.removeValue(forKey: id) != nil else { return }
        out.append(.resolve(id: id, .notConnected(Self.abandonedReason)))
        guard !requests.removeQueuedWrite(id: id), phase == .connected else { return }
        out.append(.log(.info, "request \(id) abandoned by its HTTP client: cancelling it on the worker"))
        requests.queueCancel(id: id)
    }

    mutating func statusChunk(_ bytes: [UInt8], now: Int64) {
        status.lastSeenMs = now
        for event in statusFramer.feed(bytes, nowMs: now) {
            if case .object(let object) = event, let json = try? JSON.parse(object) { applyStatus(json) }
        }
    }

    mutating func applyStatus(_ json: JSONValue) {
        if let state = json["modelState"]?.stringValue { status.modelState = String(state.prefix(32)) }
        if let battery = json["batteryPct"]?.intValue { status.batteryPct = battery < 0 ? nil : Int(min(100, battery)) }
        if let name = json["name"]?.stringValue, name.hasPrefix("EdgeCoder-"), name.count <= 64 { status.deviceName = name }
    }
}
