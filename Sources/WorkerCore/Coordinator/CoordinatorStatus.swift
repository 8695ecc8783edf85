/// What the coordinator side shows in `status` (service §1).
public struct CoordinatorStatus: Sendable, Equatable {
    public var registered = false
    public var lastHeartbeatAtMs: Int64?
    public var lastHeartbeatLatencyMs: Int64?
    /// Failed register/pull/result calls in a row: they drive the backoff.
    public var consecutiveFailures = 0
    /// Failed heartbeats in a row (heartbeats keep their cadence; no backoff).
    public var heartbeatFailures = 0
    public var backoffMs: Int64?
    public var lastError: String?
    public var rejection: String?
    public var retryAtMs: Int64?
    public var deferredReason: String?
    public var subtasksDone: Int64 = 0
    public var subtasksFailed: Int64 = 0
    public var outboxDepth = 0
    public var running: String?

    public init() {}

    public var json: JSONValue {
        var object = JSONObject([
            ("registered", .bool(registered)), ("consecutiveFailures", .int(consecutiveFailures)),
            ("heartbeatFailures", .int(heartbeatFailures)),
        ])
        object["lastHeartbeat"] = lastHeartbeatAtMs.map { .string(formatUTC(milliseconds: $0)) } ?? .null
        object["lastHeartbeatLatencyMs"] = .optional(lastHeartbeatLatencyMs)
        object["backoffMs"] = .optional(backoffMs)
        object["lastError"] = .optional(lastError)
        object["rejection"] = .optional(rejection)
        object["retryAt"] = retryAtMs.map { .string(formatUTC(milliseconds: $0)) } ?? .null
        object["deferredReason"] = .optional(deferredReason)
        object["subtasksDone"] = .int(subtasksDone)
        object["subtasksFailed"] = .int(subtasksFailed)
        object["outboxDepth"] = .int(outboxDepth)
        object["running"] = .optional(running)
        return .object(object)
    }
}
