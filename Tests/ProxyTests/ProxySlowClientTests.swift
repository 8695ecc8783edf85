import Foundation
import Testing
import Logging
import Posix
import TestSupport
@testable import Proxy
import WorkerCore

/// Clients that stop reading (issue #26): the proxy's writes have a progress deadline, so
/// such a client loses its connection instead of holding it (and a place under the cap)
/// forever, while a slow client that does read gets its whole answer.
@Suite struct ProxySlowClientTests {
    let helper = HTTPTestClient()

    func withServer(
        _ upstream: ScriptedUpstream, writeProgressMs: Int64, maxConnectionsPerAddress: Int = ProxyServer.defaultMaxConnectionsPerAddress,
        _ body: @escaping @Sendable (UInt16, ProxyServer) async throws -> Void
    ) async throws {
        let listener = try LoopbackTCPListener(port: 0)
        let server = ProxyServer(
            listener: listener, upstream: upstream, version: "9.9.9", logger: Logger(label: "t", level: .error),
            requestTimeoutMs: 60_000, idleTimeoutMs: 60_000, writeProgressMs: writeProgressMs,
            maxConnectionsPerAddress: maxConnectionsPerAddress)
        let serving = Task { await server.run() }
        let outcome: Result<Void, any Error>
        do { try await body(listener.port, server); outcome = .success(()) } catch { outcome = .failure(error) }
        serving.cancel()
        await serving.value
        listener.close()
        try outcome.get()
    }

    /// A client socket with a tiny receive buffer, so that the server's writes block soon.
    static func connectWithSmallReceiveBuffer(_ port: UInt16) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var size: Int32 = 2_048
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        let rc = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard rc == 0 else { close(fd); throw POSIXError(.ECONNREFUSED) }
        return fd
    }

    /// Polls until the server serves `count` connections; the seconds that took, or nil.
    static func secondsUntil(_ server: ProxyServer, serves count: Int, within seconds: Double) async throws -> Double? {
        let started = Date()
        while Date().timeIntervalSince(started) < seconds {
            if await server.openConnections == count { return Date().timeIntervalSince(started) }
            try await Task.sleep(nanoseconds: 20_000_000)
        }
        return nil
    }

    /// The issue's case: ten pipelined streamed requests of megabytes each and a client
    /// that never reads. Without a deadline the connection stayed open for as long as the
    /// answers took; with it, it closes one deadline after the client's buffers filled.
    @Test func aClientThatStopsReadingLosesItsConnectionAfterTheDeadline() async throws {
        let piece = String(repeating: "x", count: 65_536)
        let upstream = ScriptedUpstream(
            answer: .answered(ok: true, output: "", error: nil, workerDurationMs: 1), deltas: Array(repeating: piece, count: 64))
        try await withServer(upstream, writeProgressMs: 400) { port, server in
            let request = helper.http("POST", "/api/generate", body: #"{"model":"m","prompt":"p","stream":true}"#)
            let fd = try Self.connectWithSmallReceiveBuffer(port)
            defer { close(fd) }
            HTTPTestClient.send(fd, Array(Array(repeating: request, count: 10).joined()))
            #expect(try await Self.secondsUntil(server, serves: 1, within: 5) != nil, "the connection is served")
            // The client holds its socket open and never reads: only the deadline can end it.
            let took = try await Self.secondsUntil(server, serves: 0, within: 10)
            let tookSeconds = took ?? 10
            let closed = took != nil
            #expect(closed, "the server closed the stalled connection")
            #expect(tookSeconds >= 0.3, "not before the deadline: \(tookSeconds) s")
            #expect(tookSeconds < 5, "about one deadline after the buffers filled: \(tookSeconds) s")
            // The server's side is gone: reading drains what was sent, then ends.
            var timeout = timeval(tv_sec: 5, tv_usec: 0)
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            var buffer = [UInt8](repeating: 0, count: 65_536)
            var total = 0
            while true {
                let n = recv(fd, &buffer, buffer.count, 0)
                if n <= 0 { #expect(n == 0 || errno == ECONNRESET, "end of stream, not a timeout (errno \(errno))"); break }
                total += n
            }
            #expect(total < 64 * 65_536, "the first answer was cut short: \(total) bytes")
        }
    }

    /// The deadline is on progress, not on the whole answer: a client that reads slowly,
    /// taking longer than the deadline for the whole answer, still gets all of it.
    @Test func aSlowClientThatKeepsReadingGetsTheWholeAnswer() async throws {
        let piece = String(repeating: "y", count: 16_384)
        let upstream = ScriptedUpstream(
            answer: .answered(ok: true, output: "", error: nil, workerDurationMs: 1), deltas: Array(repeating: piece, count: 24))
        try await withServer(upstream, writeProgressMs: 300) { port, _ in
            let request = helper.http("POST", "/api/generate", body: #"{"model":"m","prompt":"p","stream":true}"#)
            let (answer, seconds) = try await helper.onThread { () -> (String, Double) in
                let fd = try Self.connectWithSmallReceiveBuffer(port)
                defer { close(fd) }
                var timeout = timeval(tv_sec: 10, tv_usec: 0)
                setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                HTTPTestClient.send(fd, request)
                let started = Date()
                var bytes: [UInt8] = []
                var chunk = [UInt8](repeating: 0, count: 8_192)
                while HTTPTestClient.answerEnd(bytes) == nil {
                    let n = recv(fd, &chunk, chunk.count, 0)
                    if n <= 0 { break }
                    bytes += chunk[0..<n]
                    usleep(20_000)
                }
                return (String(decoding: bytes, as: UTF8.self), Date().timeIntervalSince(started))
            }
            #expect(seconds > 0.3, "the answer took longer than the deadline: \(seconds) s")
            #expect(answer.components(separatedBy: piece).count - 1 == 24, "every piece arrived")
            #expect(answer.contains(#""done":true"#))
        }
    }

    /// The issue's 64 slow clients, all from 127.0.0.1 and all stalled with the deadline at
    /// its real 30 s: at most 32 hold a connection (the per-address cap), and a newcomer
    /// evicts the one still for longest, so `/api/version` is answered at once.
    @Test func sixtyFourStalledClientsLeaveTheVersionAnswered() async throws {
        let piece = String(repeating: "z", count: 65_536)
        let upstream = ScriptedUpstream(
            answer: .answered(ok: true, output: "", error: nil, workerDurationMs: 1), deltas: Array(repeating: piece, count: 64))
        try await withServer(upstream, writeProgressMs: ProxyServer.defaultWriteProgressMs) { port, server in
            let request = helper.http("POST", "/api/generate", body: #"{"model":"m","prompt":"p","stream":true}"#)
            var clients: [Int32] = []
            defer { clients.forEach { close($0) } }
            for _ in 0..<64 {
                let fd = try Self.connectWithSmallReceiveBuffer(port)
                clients.append(fd)
                HTTPTestClient.send(fd, Array(Array(repeating: request, count: 10).joined()))
                #expect(await server.openConnections <= ProxyServer.defaultMaxConnectionsPerAddress)
            }
            // Long enough for the stalled ones to be evictable.
            try await Task.sleep(nanoseconds: UInt64(ProxyServer.evictableAfterMs + 300) * 1_000_000)
            #expect(await server.openConnections <= ProxyServer.defaultMaxConnectionsPerAddress)
            // A newcomer is refused (503) only while every connection of its address moved in
            // the last second; on a loaded machine the last writes into the stalled clients'
            // buffers can take a few seconds to stop, so it asks again, as a client would.
            let started = Date()
            var version = ""
            repeat {
                version = try await helper.exchange(port, helper.http("GET", "/api/version"))
                if version.hasPrefix("HTTP/1.1 200") { break }
                try await Task.sleep(nanoseconds: 300_000_000)
            } while Date().timeIntervalSince(started) < 10
            #expect(version.hasPrefix("HTTP/1.1 200") && version.contains("9.9.9"), "\(version.prefix(120))")
            // Before the fix: a 503 after 45 s. Here 0.5–4.5 s on the shared 2-core test machine.
            #expect(Date().timeIntervalSince(started) < 10, "answered well before any deadline")
        }
    }

    /// The cap per address refuses while every connection of that address is moving, and
    /// evicts once one has been still long enough.
    @Test func thePerAddressCapRefusesThenEvictsTheStillest() async throws {
        let upstream = ScriptedUpstream(answer: .answered(ok: true, output: "x", error: nil, workerDurationMs: 1))
        try await withServer(upstream, writeProgressMs: 5_000, maxConnectionsPerAddress: 2) { port, server in
            let first = try HTTPTestClient.connectBlocking(port)
            defer { close(first) }
            let second = try HTTPTestClient.connectBlocking(port)
            defer { close(second) }
            #expect(try await Self.secondsUntil(server, serves: 2, within: 5) != nil)
            let refused = try await helper.exchange(port, helper.http("GET", "/api/version"))
            #expect(refused.hasPrefix("HTTP/1.1 503") && refused.contains("too many connections from 127.0.0.1"), "\(refused.prefix(160))")
            try await Task.sleep(nanoseconds: UInt64(ProxyServer.evictableAfterMs + 200) * 1_000_000)
            let answered = try await helper.exchange(port, helper.http("GET", "/api/version"))
            #expect(answered.hasPrefix("HTTP/1.1 200"), "\(answered.prefix(160))")
            // The first connection (the stillest, the oldest of equals) was the one closed.
            var timeout = timeval(tv_sec: 5, tv_usec: 0)
            setsockopt(first, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            var byte: UInt8 = 0
            #expect(recv(first, &byte, 1, 0) == 0, "the evicted connection is closed")
        }
    }
}
