import Foundation
import Synchronization
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif
@testable import HTTP

/// Polls a condition of the server's notes.
private func eventually(_ condition: @escaping () -> Bool) async -> Bool {
    await waitUntil(timeoutMs: 5_000, pollMs: 10) { condition() }
}

/// Numbers the connections a server accepts, 1 first.
private final class ConnectionNumbers: Sendable {
    private let last = Mutex(0)
    func next() -> Int {
        last.withLock { last in
            last += 1
            return last
        }
    }
}

private let okAnswer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

extension ScriptedTCPServer {
    /// A server that notes each connection (`accepted`) and writes, for every request on it,
    /// what `answer` gives for the request (nothing for nil), until the client closes it
    /// (`closed by the client`). `answer` runs on the connection's thread.
    convenience init(answering answer: @escaping @Sendable (_ request: String, _ notes: ScriptedTCPServer.Notes) -> String?) throws {
        try self.init { fd, server in
            server.note("accepted")
            while true {
                let request = ScriptedTCPServer.readRequest(fd)
                if request.isEmpty { return server.note("closed by the client") }
                if let bytes = answer(request, server) { ScriptedTCPServer.write(fd, bytes) }
            }
        }
    }

    /// The same, with one answer for every request.
    convenience init(answeringEachRequestWith answer: String) throws {
        try self.init(answering: { _, _ in answer })
    }

    var acceptedCount: Int { notes.filter { $0 == "accepted" }.count }
}

/// A transport with a pool of its own, so no other test's connections are in it.
private func transportWithItsOwnPool(_ pool: PlainConnectionPool = PlainConnectionPool()) -> PlainHTTPTransport {
    PlainHTTPTransport(pool: pool)
}

@Suite struct PlainHTTPTransportKeepsConnectionsAlive {
    @Test func twoRequestsInARowShareOneConnection() async throws {
        let server = try ScriptedTCPServer(answeringEachRequestWith: okAnswer)
        let transport = transportWithItsOwnPool()
        for _ in 0..<2 { #expect(try await transport.perform(HTTPRequest(url: server.base + "/")).body == Array("ok".utf8)) }
        #expect(server.acceptedCount == 1, "\(server.notes)")
    }

    @Test func aStreamReadToItsEndLeavesItsConnectionForTheNextRequest() async throws {
        let server = try ScriptedTCPServer(answeringEachRequestWith: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n")
        let transport = transportWithItsOwnPool()
        #expect(try await transport.stream(HTTPRequest(url: server.base + "/api/chat")).collect(limit: 100) == Array("ok".utf8))
        #expect(try await transport.perform(HTTPRequest(url: server.base + "/")).body == Array("ok".utf8))
        #expect(server.acceptedCount == 1, "\(server.notes)")
    }

    @Test func anHTTP10AnswerWithKeepAliveKeepsTheConnection() async throws {
        let server = try ScriptedTCPServer(answeringEachRequestWith: "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok")
        let transport = transportWithItsOwnPool()
        for _ in 0..<2 { _ = try await transport.perform(HTTPRequest(url: server.base + "/")) }
        #expect(server.acceptedCount == 1, "\(server.notes)")
    }

    @Test(arguments: [
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
        "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
    ])
    func anAnswerThatDoesNotAllowKeepAliveCostsEachRequestItsConnection(answer: String) async throws {
        // The server keeps the connection open all the same: the client must close it.
        let server = try ScriptedTCPServer(answeringEachRequestWith: answer)
        let transport = transportWithItsOwnPool()
        for _ in 0..<2 { _ = try await transport.perform(HTTPRequest(url: server.base + "/")) }
        #expect(server.acceptedCount == 2, "\(server.notes)")
        #expect(await eventually { server.notes.filter { $0 == "closed by the client" }.count == 2 }, "\(server.notes)")
        #expect(transport.pool.idleCount(for: .init(host: "127.0.0.1", port: server.port)) == 0)
    }

    /// The request's `Connection` is read as the answer's is (a list, any case).
    @Test(arguments: ["close", "TE, Close"])
    func aRequestAskingToCloseDoesNotLeaveItsConnection(connection: String) async throws {
        let server = try ScriptedTCPServer(answeringEachRequestWith: okAnswer)
        let transport = transportWithItsOwnPool()
        _ = try await transport.perform(HTTPRequest(url: server.base + "/", headers: [("connection", connection)]))
        _ = try await transport.perform(HTTPRequest(url: server.base + "/"))
        #expect(server.acceptedCount == 2, "\(server.notes)")
    }

    @Test func aServerThatClosesTheIdleConnectionCostsTheNextRequestNothing() async throws {
        let server = try ScriptedTCPServer { fd, server in
            server.note("accepted")
            _ = ScriptedTCPServer.readRequest(fd)
            ScriptedTCPServer.write(fd, okAnswer)
        }
        let transport = transportWithItsOwnPool()
        for _ in 0..<3 { #expect(try await transport.perform(HTTPRequest(url: server.base + "/")).status == 200) }
        #expect(server.acceptedCount == 3, "\(server.notes)")
    }

    @Test func aReusedConnectionClosedBeforeTheAnswerIsRetriedOnANewOne() async throws {
        // The first connection answers once, then takes the next request and closes: the
        // race of a server's keep-alive timeout with the client's request.
        let numbers = ConnectionNumbers()
        let server = try ScriptedTCPServer { fd, server in
            let number = numbers.next()
            server.note("accepted")
            let request = ScriptedTCPServer.readRequest(fd)
            server.note("connection \(number): \(request.split(separator: "\r\n").first ?? "")")
            if number == 1 {
                ScriptedTCPServer.write(fd, okAnswer)
                let next = ScriptedTCPServer.readRequest(fd)
                server.note("connection 1 closes at: \(next.split(separator: "\r\n").first ?? "")")
            } else {
                server.note("body: \(request.components(separatedBy: "\r\n\r\n").last ?? "")")
                ScriptedTCPServer.write(fd, "HTTP/1.1 201 Created\r\nContent-Length: 4\r\n\r\nmade")
            }
        }
        let transport = transportWithItsOwnPool()
        _ = try await transport.perform(HTTPRequest(url: server.base + "/first"))
        let response = try await transport.perform(HTTPRequest(method: "POST", url: server.base + "/second", body: Array("{\"n\":2}".utf8)))
        #expect(response.status == 201 && response.body == Array("made".utf8))
        #expect(
            server.notes == [
                "accepted", "connection 1: GET /first HTTP/1.1", "connection 1 closes at: POST /second HTTP/1.1", "accepted",
                "connection 2: POST /second HTTP/1.1", "body: {\"n\":2}",
            ], "\(server.notes)")
    }

    @Test func theRetryIsTheOnlyOne() async throws {
        // Every connection after the first takes the request and closes without answering.
        let numbers = ConnectionNumbers()
        let server = try ScriptedTCPServer { fd, server in
            let number = numbers.next()
            server.note("accepted")
            _ = ScriptedTCPServer.readRequest(fd)
            if number == 1 {
                ScriptedTCPServer.write(fd, okAnswer)
                _ = ScriptedTCPServer.readRequest(fd)
            }
        }
        let transport = transportWithItsOwnPool()
        _ = try await transport.perform(HTTPRequest(url: server.base + "/"))
        await #expect {
            _ = try await transport.perform(HTTPRequest(url: server.base + "/"))
        } throws: { error in
            (error as? HTTPError)?.kind == .transfer && (error as? HTTPError)?.message.contains("without answering") == true
        }
        // The client is done: the server has seen every connection it will.
        #expect(await eventually { server.acceptedCount == 2 })
        await settle()
        #expect(server.acceptedCount == 2, "\(server.notes)")
    }

    @Test func noRetryOnceAByteOfTheAnswerArrived() async throws {
        let server = try ScriptedTCPServer { fd, server in
            server.note("accepted")
            _ = ScriptedTCPServer.readRequest(fd)
            ScriptedTCPServer.write(fd, okAnswer)
            _ = ScriptedTCPServer.readRequest(fd)
            ScriptedTCPServer.write(fd, "HTTP/1.1 200")
        }
        let transport = transportWithItsOwnPool()
        _ = try await transport.perform(HTTPRequest(url: server.base + "/"))
        await #expect {
            _ = try await transport.perform(HTTPRequest(url: server.base + "/"))
        } throws: { error in
            (error as? HTTPError)?.kind == .transfer && (error as? HTTPError)?.message.contains("status line") == true
        }
        await settle()
        #expect(server.acceptedCount == 1, "\(server.notes)")
    }

    @Test func aStreamLeftEarlyDoesNotGoBackToThePool() async throws {
        let server = try ScriptedTCPServer(answering: { request, _ in
            request.hasPrefix("GET /stream ") ? "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n" : okAnswer
        })
        let transport = transportWithItsOwnPool()
        _ = try await transport.perform(HTTPRequest(url: server.base + "/"))
        for try await _ in try await transport.stream(HTTPRequest(url: server.base + "/stream", totalTimeoutMs: 20_000)).body { break }
        #expect(await eventually { server.notes == ["accepted", "closed by the client"] }, "\(server.notes)")
        _ = try await transport.perform(HTTPRequest(url: server.base + "/"))
        #expect(server.acceptedCount == 2, "\(server.notes)")
    }

    @Test func aCancelledRequestDoesNotGoBackToThePool() async throws {
        let server = try ScriptedTCPServer(answering: { request, notes in
            guard request.hasPrefix("GET /slow ") else { return okAnswer }
            notes.note("asked")
            return nil
        })
        let transport = transportWithItsOwnPool()
        let url = server.base
        _ = try await transport.perform(HTTPRequest(url: url + "/"))
        let task = Task { try await transport.perform(HTTPRequest(url: url + "/slow", totalTimeoutMs: 20_000)) }
        #expect(await eventually { server.notes.contains("asked") })
        task.cancel()
        await #expect(throws: CancellationError.self) { try await task.value }
        _ = try await transport.perform(HTTPRequest(url: url + "/"))
        #expect(server.acceptedCount == 2, "\(server.notes)")
    }

    @Test(arguments: ["too large", "timed out"])
    func anAnswerCutShortDoesNotLeaveItsConnection(ending: String) async throws {
        // The server keeps the connection open after its part: only the client's rule
        // keeps it out of the pool.
        let server = try ScriptedTCPServer(answering: { request, _ in
            request.hasPrefix("GET /cut ") ? "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + String(repeating: "x", count: 10) : okAnswer
        })
        let transport = transportWithItsOwnPool()
        _ = try await transport.perform(HTTPRequest(url: server.base + "/"))
        let cut = HTTPRequest(
            url: server.base + "/cut", totalTimeoutMs: ending == "timed out" ? 200 : 5_000, maxResponseBytes: ending == "too large" ? 100 : 10_000)
        await #expect(throws: HTTPError.self) { try await transport.perform(cut) }
        _ = try await transport.perform(HTTPRequest(url: server.base + "/"))
        #expect(server.acceptedCount == 2, "\(server.notes)")
    }

    @Test func anIdleConnectionPastTheIdleLimitIsClosedNotReused() async throws {
        let clock = ManualNanoseconds()
        let server = try ScriptedTCPServer(answeringEachRequestWith: okAnswer)
        let transport = transportWithItsOwnPool(PlainConnectionPool(idleLimitNanoseconds: 4_000_000_000, now: { clock.now }))
        _ = try await transport.perform(HTTPRequest(url: server.base + "/"))
        clock.now = 3_999_999_999
        _ = try await transport.perform(HTTPRequest(url: server.base + "/"))
        #expect(server.acceptedCount == 1, "just within the limit: \(server.notes)")
        clock.now += 4_000_000_000
        _ = try await transport.perform(HTTPRequest(url: server.base + "/"))
        #expect(server.acceptedCount == 2, "\(server.notes)")
        #expect(await eventually { server.notes.filter { $0 == "closed by the client" }.count == 1 }, "\(server.notes)")
    }

    @Test func atMostTwoConnectionsAPeerStayIdle() async throws {
        // Three requests at once hold three connections; the server answers only once all
        // three are in, so none can reuse another's.
        let arrived = HitCounter()
        let server = try ScriptedTCPServer(answering: { _, _ in
            // The first three requests, one on each connection, wait until all three are in.
            if arrived.count < 3 {
                arrived.increment()
                for _ in 0..<500 where arrived.count < 3 { usleep(10_000) }
            }
            return okAnswer
        })
        let transport = transportWithItsOwnPool()
        let url = server.base + "/"
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<3 { group.addTask { _ = try await transport.perform(HTTPRequest(url: url)) } }
            try await group.waitForAll()
        }
        #expect(server.acceptedCount == 3)
        #expect(transport.pool.idleCount(for: .init(host: "127.0.0.1", port: server.port)) == 2)
        #expect(await eventually { server.notes.filter { $0 == "closed by the client" }.count == 1 }, "\(server.notes)")
        for _ in 0..<2 { _ = try await transport.perform(HTTPRequest(url: url)) }
        #expect(server.acceptedCount == 3, "\(server.notes)")
    }
}

/// A monotonic clock that moves only when the test sets it.
private final class ManualNanoseconds: Sendable {
    private let value = Mutex<UInt64>(0)
    var now: UInt64 {
        get { value.withLock { $0 } }
        set { value.withLock { $0 = newValue } }
    }
}

/// The pool alone, with socket pairs for connections: the far end shows what the pool
/// closed.
@Suite struct PlainConnectionPoolHoldsIdleConnections {
    private static let peer = PlainConnectionPool.Peer(host: "h", port: 80)

    /// A connected pair: the near end for the pool, the far end for the test.
    private static func socketPair() -> (near: Int32, far: Int32) {
        var fds: [Int32] = [-1, -1]
        precondition(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0)
        return (fds[0], fds[1])
    }

    /// Whether the near end of `far` was closed: EOF at once, or a reset when the near
    /// end had unread bytes.
    private static func nearEndClosed(_ far: Int32) -> Bool {
        var byte: UInt8 = 0
        let n = recv(far, &byte, 1, Int32(MSG_DONTWAIT))
        return n == 0 || (n < 0 && errno == ECONNRESET)
    }

    @Test func takesTheMostRecentlyPutBackFirst() {
        let pool = PlainConnectionPool()
        let (a, farA) = Self.socketPair(), (b, farB) = Self.socketPair()
        defer { [a, b, farA, farB].forEach { close($0) } }
        pool.putBack(a, for: Self.peer)
        pool.putBack(b, for: Self.peer)
        #expect(pool.take(Self.peer) == b)
        #expect(pool.take(Self.peer) == a)
        #expect(pool.take(Self.peer) == nil)
        #expect(pool.take(.init(host: "h", port: 81)) == nil)
    }

    @Test func pastTheBoundTheLongestIdleIsClosed() {
        let pool = PlainConnectionPool(maxIdlePerPeer: 2)
        let pairs = (0..<3).map { _ in Self.socketPair() }
        defer { pairs.forEach { close($0.far) } }
        pairs.forEach { pool.putBack($0.near, for: Self.peer) }
        #expect(pool.idleCount(for: Self.peer) == 2)
        #expect(pairs.map { Self.nearEndClosed($0.far) } == [true, false, false])
    }

    @Test func aConnectionItsServerClosedOrWroteOnIsClosedAndSkipped() {
        let pool = PlainConnectionPool(maxIdlePerPeer: 3)
        let (good, farGood) = Self.socketPair(), (hungUp, farHungUp) = Self.socketPair(), (chatty, farChatty) = Self.socketPair()
        defer { [good, farGood, farChatty].forEach { close($0) } }
        pool.putBack(good, for: Self.peer)
        pool.putBack(hungUp, for: Self.peer)
        pool.putBack(chatty, for: Self.peer)
        close(farHungUp)
        _ = send(farChatty, "x", 1, 0)
        #expect(pool.take(Self.peer) == good)
        #expect(Self.nearEndClosed(farChatty))
        #expect(pool.idleCount(for: Self.peer) == 0)
    }

    @Test func takingClosesTheConnectionsPastTheIdleLimitOfEveryPeer() {
        let clock = ManualNanoseconds()
        let pool = PlainConnectionPool(idleLimitNanoseconds: 1_000, now: { clock.now })
        let other = PlainConnectionPool.Peer(host: "other", port: 80)
        let (old, farOld) = Self.socketPair(), (young, farYoung) = Self.socketPair()
        defer { [farOld, farYoung].forEach { close($0) } }
        pool.putBack(old, for: other)
        clock.now = 500
        pool.putBack(young, for: Self.peer)
        clock.now = 1_000
        #expect(pool.take(.init(host: "third", port: 1)) == nil)
        #expect(Self.nearEndClosed(farOld) && pool.idleCount(for: other) == 0)
        #expect(pool.take(Self.peer) == young)
        close(young)
    }
}
