/// The control protocol between `edgecoder-worker` clients and the daemon: one JSON
/// object per line each way over the Unix socket in the runtime directory.
///
/// Request: `{"cmd": "status"}`, `{"cmd": "mode"}`, `{"cmd": "mode", "set": "on"}`,
/// `{"cmd": "events", "follow": true, "limit": 50}`.
/// Answer: `{"ok": true, "result": {...}}` or `{"ok": false, "error": {"code": "...", "message": "..."}}`.
/// `events` with `follow` answers once, then sends `{"event": {...}}` lines as they happen.
public enum ControlRequest: Sendable, Equatable {
    case status
    case getMode
    case setMode(Mode)
    /// `mode off --for`: off for `forMs`, then back to the mode before.
    case pause(forMs: Int64)
    case events(follow: Bool, limit: Int?)
    case tasks(limit: Int?)
    /// One task whole (`tasks show ID`).
    case task(id: String)
    case policyShow
    case policyChange(PolicyOverrides.Change)
    /// Re-read the config file, as SIGHUP does, answered once it is applied or refused:
    /// what `systemctl reload` runs, so that it returns only when the reload is done.
    case reload
    case ping

    /// Whether the request changes the daemon (and so needs the changing privilege).
    public var changes: Bool {
        switch self {
        case .setMode, .pause, .policyChange, .reload: return true
        default: return false
        }
    }

    /// What a peer needs to be answered.
    public var requiredAccess: ControlAccess { changes ? .change : .read }

    public var json: JSONValue {
        switch self {
        case .status: return ["cmd": "status"]
        case .getMode: return ["cmd": "mode"]
        case .setMode(let mode): return ["cmd": "mode", "set": .string(mode.rawValue)]
        case .pause(let forMs): return ["cmd": "mode", "set": "off", "forMs": .int(forMs)]
        case .events(let follow, let limit):
            var object = JSONObject([("cmd", "events"), ("follow", .bool(follow))])
            if let limit { object["limit"] = .int(limit) }
            return .object(object)
        case .tasks(let limit):
            var object = JSONObject([("cmd", "tasks")])
            if let limit { object["limit"] = .int(limit) }
            return .object(object)
        case .task(let id): return ["cmd": "task", "id": .string(id)]
        case .policyShow: return ["cmd": "policy"]
        case .policyChange(.set(let key, let value)): return ["cmd": "policy", "set": .string(key), "value": value]
        case .policyChange(.unset(let key)): return ["cmd": "policy", "unset": .string(key)]
        case .reload: return ["cmd": "reload"]
        case .ping: return ["cmd": "ping"]
        }
    }

    /// Longest task id `task` takes; coordinator and Bluetooth ids are far shorter.
    public static let maxTaskIDBytes = 1024

    /// Longest request line the daemon reads; anything longer is not from our client.
    public static let maxLineBytes = 65_536

    public static func parse(_ line: ArraySlice<UInt8>) -> Result<ControlRequest, ControlError> {
        let value: JSONValue
        do {
            value = try JSON.parse(line, maxDepth: 8)
        } catch {
            return .failure(ControlError(.badRequest, "the request is not valid JSON: \(error)"))
        }
        guard case .object(let object) = value else {
            return .failure(ControlError(.badRequest, "the request must be a JSON object, got \(value.typeDescription)"))
        }
        guard let cmd = object["cmd"]?.stringValue else {
            return .failure(ControlError(.badRequest, "the request has no \"cmd\" string"))
        }
        func unexpected(_ allowed: Set<String>) -> ControlError? {
            for key in object.keys where !allowed.contains(key) {
                return ControlError(.badRequest, "unknown field \"\(printable(key))\" for cmd \"\(printable(cmd))\"")
            }
            return nil
        }
        switch cmd {
        case "status":
            if let error = unexpected(["cmd"]) { return .failure(error) }
            return .success(.status)
        case "ping":
            if let error = unexpected(["cmd"]) { return .failure(error) }
            return .success(.ping)
        case "reload":
            if let error = unexpected(["cmd"]) { return .failure(error) }
            return .success(.reload)
        case "mode":
            if let error = unexpected(["cmd", "set", "forMs"]) { return .failure(error) }
            guard let set = object["set"] else {
                if object["forMs"] != nil { return .failure(ControlError(.badRequest, "\"forMs\" goes with \"set\": \"off\"")) }
                return .success(.getMode)
            }
            guard let name = set.stringValue, let mode = Mode(rawValue: name) else {
                return .failure(ControlError(.badRequest, "\"set\" must be one of \"off\", \"on\", \"bluetooth\", got \(printable(set.serialized))"))
            }
            if let value = object["forMs"] {
                guard mode == .off else { return .failure(ControlError(.badRequest, "\"forMs\" goes with \"set\": \"off\" only")) }
                guard let forMs = value.intValue, forMs >= PauseDuration.minimumMs, forMs <= PauseDuration.maximumMs else {
                    return .failure(
                        ControlError(.badRequest, "\"forMs\" must be an integer in \(PauseDuration.minimumMs)…\(PauseDuration.maximumMs)"))
                }
                return .success(.pause(forMs: forMs))
            }
            return .success(.setMode(mode))
        case "events":
            if let error = unexpected(["cmd", "follow", "limit"]) { return .failure(error) }
            var follow = false
            if let value = object["follow"] {
                guard let b = value.boolValue else { return .failure(ControlError(.badRequest, "\"follow\" must be a boolean")) }
                follow = b
            }
            var limit: Int?
            if let value = object["limit"] {
                guard let n = value.intValue, n >= 1, n <= 100_000 else {
                    return .failure(ControlError(.badRequest, "\"limit\" must be an integer in 1…100000"))
                }
                limit = Int(n)
            }
            return .success(.events(follow: follow, limit: limit))
        case "tasks":
            if let error = unexpected(["cmd", "limit"]) { return .failure(error) }
            var limit: Int?
            if let value = object["limit"] {
                guard let n = value.intValue, n >= 1, n <= 1_000 else {
                    return .failure(ControlError(.badRequest, "\"limit\" must be an integer in 1…1000"))
                }
                limit = Int(n)
            }
            return .success(.tasks(limit: limit))
        case "task":
            if let error = unexpected(["cmd", "id"]) { return .failure(error) }
            guard let id = object["id"]?.stringValue, !id.isEmpty, id.utf8.count <= ControlRequest.maxTaskIDBytes else {
                return .failure(ControlError(.badRequest, "\"id\" must be a non-empty string of at most \(ControlRequest.maxTaskIDBytes) bytes"))
            }
            return .success(.task(id: id))
        case "policy":
            if let error = unexpected(["cmd", "set", "value", "unset"]) { return .failure(error) }
            switch (object["set"], object["value"], object["unset"]) {
            case (nil, nil, nil): return .success(.policyShow)
            case (.string(let key)?, let value?, nil): return .success(.policyChange(.set(key: key, value: value)))
            case (nil, nil, .string(let key)?): return .success(.policyChange(.unset(key: key)))
            default:
                return .failure(ControlError(.badRequest, "policy takes either \"set\" (a key) with \"value\", or \"unset\" (a key)"))
            }
        default:
            return .failure(ControlError(.unknownCommand, "unknown cmd \"\(printable(cmd))\""))
        }
    }
}

/// An error answered over the control socket; `code` is what clients match on.
public struct ControlError: Error, Sendable, Equatable {
    public enum Code: String, Sendable {
        case badRequest = "bad-request"
        case unknownCommand = "unknown-command"
        case forbidden
        case refused
        case tooLong = "too-long"
        /// What the request names does not exist (`task` with an id the history lacks).
        case notFound = "not-found"
        case busy
        case internalError = "internal"
    }
    public var code: Code
    public var message: String
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var json: JSONValue {
        ["ok": false, "error": ["code": .string(code.rawValue), "message": .string(message)]]
    }
}

public enum ControlAnswer {
    public static func ok(_ result: JSONValue) -> JSONValue { ["ok": true, "result": result] }
}

/// The peer of a control connection, from SO_PEERCRED and SO_PEERGROUPS.
public struct PeerCredentials: Sendable, Equatable {
    public var pid: Int32
    public var uid: UInt32
    public var gid: UInt32
    public var groups: [UInt32]
    public init(pid: Int32, uid: UInt32, gid: UInt32, groups: [UInt32]) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
        self.groups = groups
    }
}

/// What a control peer may do (service §1): reading needs root, the daemon's user or the
/// read group; changing needs root or the daemon's user.
public enum ControlAccess: Int, Sendable, Comparable {
    case none, read, change
    public static func < (a: ControlAccess, b: ControlAccess) -> Bool { a.rawValue < b.rawValue }

    public static func of(_ peer: PeerCredentials, daemonUID: UInt32, readGroupGID: UInt32?) -> ControlAccess {
        if peer.uid == 0 || peer.uid == daemonUID { return .change }
        if let gid = readGroupGID, peer.gid == gid || peer.groups.contains(gid) { return .read }
        return .none
    }
}
