import Logging
import Posix
import Synchronization
import Tasks
import WorkerCore

/// The control socket: newline-delimited JSON requests from `edgecoder-worker`
/// clients, with the peer-credential rule of service §1 applied to every request. Anyone may
/// connect, so no one may crowd the operator out (issue 12 §3): places are counted per
/// user at accept time (`ControlQuota`, root and the daemon's user in a pool of their
/// own), a peer that sends no whole request within the idle time is closed, and a
/// refused request ends its connection.
public struct ControlServer: Service {
    public let name = "control"
    let listener: UnixListener
    let daemon: WorkerState
    let logger: Logger
    let daemonUID: UInt32
    let readGroupGID: UInt32?
    let readGroupName: String
    let places: ControlPlaces
    let idleTimeoutNanoseconds: UInt64
    /// The daemon's reload (the SIGHUP one), for the `reload` request; nil: refused.
    let reload: (@Sendable () async -> Void)?
    /// A connection that sends no whole request line for this long is closed.
    public static let defaultIdleTimeoutMs: Int64 = 5_000

    public init(
        listener: UnixListener, daemon: WorkerState, logger: Logger, daemonUID: UInt32, readGroupName: String, readGroupGID: UInt32?,
        quota: ControlQuota = ControlQuota(), idleTimeoutMs: Int64 = ControlServer.defaultIdleTimeoutMs,
        reload: (@Sendable () async -> Void)? = nil
    ) {
        self.reload = reload
        self.listener = listener
        self.daemon = daemon
        self.logger = logger
        self.daemonUID = daemonUID
        self.readGroupName = readGroupName
        self.readGroupGID = readGroupGID
        self.places = ControlPlaces(quota)
        self.idleTimeoutNanoseconds = UInt64(max(1, idleTimeoutMs)) * 1_000_000
    }

    /// Who is at the other end, read once at accept time.
    struct Peer: Sendable {
        var uid: UInt32
        var access: ControlAccess
        var privileged: Bool
    }

    public func run(shutdown: GracefulShutdown) async throws {
        _ = try await shutdown.cancelling {
            try await acceptConnections(
                accept: { try await listener.accept() }, retryAcceptFailures: false,
                admit: { connection in admit(connection) },
                serve: { connection, peer in await serve(connection, peer: peer) },
                release: { [places] peer in places.leave(peer) })
        }
    }

    /// Reads the peer's credentials (SO_PEERCRED is there right after accept) and takes a
    /// place for it, or tells it why not without waiting for it to read.
    func admit(_ connection: UnixConnection) -> Peer? {
        let peer: Peer
        do {
            let credentials = try connection.peerCredentials()
            let access = ControlAccess.of(
                PeerCredentials(pid: credentials.pid, uid: credentials.uid, gid: credentials.gid, groups: credentials.groups),
                daemonUID: daemonUID, readGroupGID: readGroupGID)
            peer = Peer(uid: credentials.uid, access: access, privileged: credentials.uid == 0 || credentials.uid == daemonUID)
        } catch {
            logger.warning("cannot read a control peer's credentials: \(error)")
            return nil
        }
        if let refusal = places.enter(peer) {
            // The same words for every refusal of one user, so the logger's repeat limit
            // folds a flood of them into a count.
            logger.warning("refusing a control connection from \(userName(uid: peer.uid)): \(refusal.message)")
            connection.sendNow(Array((ControlError(.busy, refusal.message).json.serialized + "\n").utf8))
            return nil
        }
        return peer
    }

    func serve(_ connection: UnixConnection, peer: Peer) async {
        var buffer: [UInt8] = []
        var deadline = monotonicNanoseconds() + idleTimeoutNanoseconds
        while true {
            // A whole request line must come within the idle time: a silent or trickling
            // peer gives its place back.
            guard let chunk = await read(connection, until: deadline) else {
                logger.debug("closing a control connection from uid \(peer.uid): no request within \(idleTimeoutNanoseconds / 1_000_000) ms")
                return
            }
            if chunk.isEmpty { return }
            buffer.append(contentsOf: chunk)
            while let newline = buffer.firstIndex(of: 0x0A) {
                let line = buffer[..<newline]
                defer { buffer.removeSubrange(...newline) }
                if line.allSatisfy({ $0 == 0x20 || $0 == 0x0D || $0 == 0x09 }) { continue }
                guard await handle(line, access: peer.access, peerUID: peer.uid, on: connection) else { return }
                deadline = monotonicNanoseconds() + idleTimeoutNanoseconds
            }
            if buffer.count > ControlRequest.maxLineBytes {
                try? await send(ControlError(.tooLong, "request line longer than \(ControlRequest.maxLineBytes) bytes").json, on: connection)
                return
            }
        }
    }

    /// The next bytes, or nil when the deadline passes first or reading fails.
    func read(_ connection: UnixConnection, until deadline: UInt64) async -> [UInt8]? {
        let now = monotonicNanoseconds()
        guard now < deadline else { return nil }
        let wait = deadline - now
        switch await race({ try? await connection.read() }, { try? await Task.sleep(nanoseconds: wait) }) {
        case .first(let chunk): return chunk
        case .second: return nil
        }
    }

    /// Answers one request line; false ends the connection.
    func handle(_ line: ArraySlice<UInt8>, access: ControlAccess, peerUID: UInt32, on connection: UnixConnection) async -> Bool {
        let request: ControlRequest
        switch ControlRequest.parse(line) {
        case .failure(let error):
            logger.info("bad control request: \(error.message)")
            return (try? await send(error.json, on: connection)) != nil
        case .success(let parsed): request = parsed
        }
        if access < request.requiredAccess {
            // Answered per request (not by hanging up) so the client reads the reason.
            let who = userName(uid: peerUID)
            let message =
                access == .none
                ? "permission denied: \(who) may not read the daemon's state; reading needs root, the daemon's user (\(userName(uid: daemonUID))) or membership in the group \(readGroupName)"
                : "permission denied: \(who) may read but not change the daemon; changing needs root or the daemon's user (\(userName(uid: daemonUID)))"
            logger.info("refused \(request.json.serialized) from \(who) (uid \(peerUID))")
            // Then hung up: a peer that may not do this keeps no place to try again in.
            try? await send(ControlError(.forbidden, message).json, on: connection)
            return false
        }
        let answer: JSONValue
        switch request {
        case .ping: answer = ControlAnswer.ok(["pong": true])
        case .status:
            await daemon.freshenIdleReading()
            answer = ControlAnswer.ok(await daemon.statusJSON())
        case .getMode: answer = ControlAnswer.ok(await daemon.modeJSON())
        case .setMode, .pause:
            // The charge gate decides on the host as it is now, not as it was at the last read.
            await daemon.freshenIdleReading()
            let who = "\(userName(uid: peerUID)) (uid \(peerUID))"
            let modeRequest: ModeRequest
            switch request {
            case .pause(let forMs): modeRequest = .operatorPause(forMs: forMs, by: who)
            case .setMode(let mode): modeRequest = .operatorSet(mode, by: who)
            default: preconditionFailure("only mode requests reach here")
            }
            let result = await daemon.request(modeRequest)
            if case .refused(let message) = result.outcome {
                answer = ControlError(.refused, message).json
            } else {
                var object = await daemon.modeJSON().objectValue ?? JSONObject()
                object["changed"] = .bool(result.outcome == .changed)
                if result.outcome == .changed { object["previous"] = .string(result.previous.rawValue) }
                answer = ControlAnswer.ok(.object(object))
            }
        case .tasks(let limit):
            answer = ControlAnswer.ok(await daemon.tasksJSON(limit: limit))
        case .task(let id):
            if let task = await daemon.taskJSON(id: id) {
                answer = ControlAnswer.ok(task)
            } else {
                answer =
                    ControlError(
                        .notFound,
                        "no task with id '\(printable(id))': the daemon keeps the newest \(TaskHistory.keepPerSource) per source; 'edgecoder-worker tasks' lists them"
                    ).json
            }
        case .policyShow:
            answer = ControlAnswer.ok(await daemon.policyJSON())
        case .policyChange(let change):
            switch await daemon.changePolicy(change, by: "\(userName(uid: peerUID)) (uid \(peerUID))") {
            case .success(let policy): answer = ControlAnswer.ok(policy)
            case .failure(let error): answer = error.json
            }
        case .reload:
            if let reload {
                await reload()
                answer = ControlAnswer.ok(await daemon.reports.configReload?.json ?? .null)
            } else {
                answer = ControlError(.refused, "this daemon was started without a config file to reload").json
            }
        case .events(let follow, let limit):
            if follow { return await streamEvents(limit: limit, on: connection) }
            let events = await daemon.recentEvents(limit: limit)
            answer = ControlAnswer.ok(["events": .array(events.map(\.json))])
        }
        return (try? await send(answer, on: connection)) != nil
    }

    /// Sends the backlog, then every new event, until the client hangs up or the daemon stops.
    func streamEvents(limit: Int?, on connection: UnixConnection) async -> Bool {
        let (backlog, stream, id) = await daemon.subscribe()
        let shown = limit.map { Array(backlog.suffix($0)) } ?? backlog
        if (try? await send(ControlAnswer.ok(["events": .array(shown.map(\.json)), "following": true]), on: connection)) != nil {
            // Watch for the client hanging up while no events come.
            _ = await race(
                {
                    for await event in stream {
                        if (try? await send(["event": event.json], on: connection)) == nil { return }
                    }
                },
                {
                    while let chunk = try? await connection.read(), !chunk.isEmpty {}
                })
        }
        // Awaited here, cancelled or not (an actor call does not check cancellation), so
        // the subscription ends with the connection, owned by no stray task.
        await daemon.unsubscribe(id)
        return false
    }

    func send(_ value: JSONValue, on connection: UnixConnection) async throws {
        try await connection.write(Array((value.serialized + "\n").utf8))
    }
}

/// The quota behind a lock, shared by the accept loop and the connections' tasks.
final class ControlPlaces: Sendable {
    private let quota: Mutex<ControlQuota>
    init(_ quota: ControlQuota) { self.quota = Mutex(quota) }
    func enter(_ peer: ControlServer.Peer) -> ControlQuota.Refusal? { quota.withLock { $0.enter(uid: peer.uid, privileged: peer.privileged) } }
    func leave(_ peer: ControlServer.Peer) { quota.withLock { $0.leave(uid: peer.uid, privileged: peer.privileged) } }
}
