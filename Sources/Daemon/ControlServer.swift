import Logging
import Posix
import WorkerCore

/// The control socket: newline-delimited JSON requests from `edgecoder-worker`
/// clients, with the peer-credential rule of SPEC 8 applied to every request.
public struct ControlServer: Service {
    public let name = "control"
    let listener: UnixListener
    let daemon: WorkerDaemon
    let logger: Logger
    let daemonUID: UInt32
    let readGroupGID: UInt32?
    let readGroupName: String
    /// More clients than this at once is not an operator; refuse the rest.
    static let maxConnections = 64

    public init(listener: UnixListener, daemon: WorkerDaemon, logger: Logger, daemonUID: UInt32, readGroupName: String, readGroupGID: UInt32?) {
        self.listener = listener
        self.daemon = daemon
        self.logger = logger
        self.daemonUID = daemonUID
        self.readGroupName = readGroupName
        self.readGroupGID = readGroupGID
    }

    public func run(shutdown: GracefulShutdown) async throws {
        _ = try await shutdown.cancelling {
            try await acceptConnections(limit: ControlServer.maxConnections, accept: { try await listener.accept() }, retryAcceptFailures: false,
                                        refuse: { [logger] _ in logger.warning("refusing a control connection: \(ControlServer.maxConnections) already open") },
                                        serve: { connection in await serve(connection) })
        }
    }

    func serve(_ connection: UnixConnection) async {
        let access: ControlAccess
        let peerUID: UInt32
        do {
            let peer = try connection.peerCredentials()
            peerUID = peer.uid
            access = ControlAccess.of(PeerCredentials(pid: peer.pid, uid: peer.uid, gid: peer.gid, groups: peer.groups),
                                      daemonUID: daemonUID, readGroupGID: readGroupGID)
        } catch {
            logger.warning("cannot read a control peer's credentials: \(error)")
            return
        }
        var buffer: [UInt8] = []
        while true {
            let chunk: [UInt8]
            do { chunk = try await connection.read() } catch { return }
            if chunk.isEmpty { return }
            buffer.append(contentsOf: chunk)
            while let newline = buffer.firstIndex(of: 0x0A) {
                let line = buffer[..<newline]
                defer { buffer.removeSubrange(...newline) }
                if line.allSatisfy({ $0 == 0x20 || $0 == 0x0D || $0 == 0x09 }) { continue }
                guard await handle(line, access: access, peerUID: peerUID, on: connection) else { return }
            }
            if buffer.count > ControlRequest.maxLineBytes {
                try? await send(ControlError(.tooLong, "request line longer than \(ControlRequest.maxLineBytes) bytes").json, on: connection)
                return
            }
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
            let message = access == .none
                ? "permission denied: \(who) may not read the daemon's state; reading needs root, the daemon's user (\(userName(uid: daemonUID))) or membership in the group \(readGroupName)"
                : "permission denied: \(who) may read but not change the daemon; changing needs root or the daemon's user (\(userName(uid: daemonUID)))"
            logger.info("refused \(request.json.serialized) from \(who) (uid \(peerUID))")
            return (try? await send(ControlError(.forbidden, message).json, on: connection)) != nil
        }
        let answer: JSONValue
        switch request {
        case .ping: answer = ControlAnswer.ok(["pong": true])
        case .status: answer = ControlAnswer.ok(await daemon.statusJSON())
        case .getMode: answer = ControlAnswer.ok(await daemon.modeJSON())
        case .setMode(let mode):
            let who = "\(userName(uid: peerUID)) (uid \(peerUID))"
            let result = await daemon.request(.operatorSet(mode, by: who))
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
        case .policyShow:
            answer = ControlAnswer.ok(await daemon.policyJSON())
        case .policyChange(let change):
            switch await daemon.changePolicy(change, by: "\(userName(uid: peerUID)) (uid \(peerUID))") {
            case .success(let policy): answer = ControlAnswer.ok(policy)
            case .failure(let error): answer = error.json
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
            _ = await race({
                for await event in stream {
                    if (try? await send(["event": event.json], on: connection)) == nil { return }
                }
            }, {
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

/// Pings systemd's watchdog at half its interval, but only while the daemon's actor
/// answers: a wedged daemon stops pinging and systemd restarts it.
public struct WatchdogService: Service {
    public let name = "watchdog"
    let intervalMicroseconds: UInt64
    let daemon: WorkerDaemon
    let notify: @Sendable (String) -> Void

    public init(intervalMicroseconds: UInt64, daemon: WorkerDaemon, notify: @escaping @Sendable (String) -> Void) {
        self.intervalMicroseconds = intervalMicroseconds
        self.daemon = daemon
        self.notify = notify
    }

    public func run(shutdown: GracefulShutdown) async throws {
        _ = try await shutdown.cancelling {
            while true {
                if await daemon.ping() { notify("WATCHDOG=1") }
                try await Task.sleep(nanoseconds: intervalMicroseconds / 2 * 1_000)
            }
        }
    }
}
