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
public func acceptConnections(
    limit: Int, counter open: ConnectionCount = ConnectionCount(),
    accept: @escaping @Sendable () async throws -> UnixConnection,
    retryAcceptFailures: Bool,
    refuse: @escaping @Sendable (UnixConnection) async -> Void,
    serve: @escaping @Sendable (UnixConnection) async -> Void
) async throws {
    try await acceptConnections(
        accept: accept, retryAcceptFailures: retryAcceptFailures,
        admit: { connection -> Bool? in
            guard await open.tryEnter(limit: limit) else {
                await refuse(connection)
                return nil
            }
            return true
        }, serve: { connection, _ in await serve(connection) }, release: { _ in await open.leave() })
}

/// The accept loop with admission decided per connection: `admit` returns a ticket (what
/// the connection holds, e.g. its peer's place in a quota) or nil to refuse it (having
/// told the peer why; it is closed at once). Each admitted connection is served in a child
/// task, then closed, then its ticket released.
public func acceptConnections<Ticket: Sendable>(
    accept: @escaping @Sendable () async throws -> UnixConnection,
    retryAcceptFailures: Bool,
    admit: @escaping @Sendable (UnixConnection) async -> Ticket?,
    serve: @escaping @Sendable (UnixConnection, Ticket) async -> Void,
    release: @escaping @Sendable (Ticket) async -> Void
) async throws {
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
            guard let ticket = await admit(connection) else {
                connection.close()
                continue
            }
            group.addTask {
                await serve(connection, ticket)
                connection.close()
                await release(ticket)
            }
        }
    }
}
