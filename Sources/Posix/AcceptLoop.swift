/// Counts open connections against a limit (control socket, proxy).
public actor ConnectionCount {
    private var open = 0
    public init() {}
    public func tryEnter(limit: Int) -> Bool {
        guard open < limit else { return false }
        open += 1
        return true
    }
    public func leave() { open -= 1 }
    public var count: Int { open }
}

/// The accept loop both servers share: accept, refuse over `limit` (the refused
/// connection gets `refuse` and is closed), serve each accepted connection in a child
/// task and close it after. Returns when accepting fails after cancellation; rethrows an
/// accept failure otherwise unless `retryAcceptFailures` (a listener that must not die of
/// one EMFILE).
public func acceptConnections(limit: Int, counter open: ConnectionCount = ConnectionCount(),
                              accept: @Sendable () async throws -> UnixConnection,
                              retryAcceptFailures: Bool,
                              refuse: @escaping @Sendable (UnixConnection) async -> Void,
                              serve: @escaping @Sendable (UnixConnection) async -> Void) async throws {
    try await withThrowingDiscardingTaskGroup { group in
        while !Task.isCancelled {
            let connection: UnixConnection
            do {
                connection = try await accept()
            } catch {
                if Task.isCancelled || !retryAcceptFailures { throw error }
                // EMFILE and friends persist for a while: do not spin on them.
                try await Task.sleep(nanoseconds: 50_000_000)
                continue
            }
            guard await open.tryEnter(limit: limit) else {
                await refuse(connection)
                connection.close()
                continue
            }
            group.addTask {
                await serve(connection)
                connection.close()
                await open.leave()
            }
        }
    }
}
