import Foundation
import Synchronization
import TestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif
@testable import HTTP

/// A TCP server on 127.0.0.1 that runs `script` on each connection it accepts, on a
/// thread of its own with the blocking socket: a test answers byte by byte, stalls, or
/// watches for the client's close. What the scripts note goes to `notes`.
final class ScriptedTCPServer: Sendable {
    /// What a connection's script noted, for the test to read.
    final class Notes: Sendable {
        private let log = Mutex<[String]>([])
        func note(_ text: String) { log.withLock { $0.append(text) } }
        var all: [String] { log.withLock { $0 } }
    }

    let port: UInt16
    private let listener: Int32
    private let log = Notes()

    init(_ script: @escaping @Sendable (_ fd: Int32, _ server: Notes) -> Void) throws {
        let (fd, port) = try listenOnLoopback(backlog: 16)
        listener = fd
        self.port = port
        let log = self.log
        // The thread holds the notes, not the server: the server's deinit ends it.
        Thread {
            while true {
                let connection = accept(fd, nil, nil)
                if connection < 0 { return }
                Thread {
                    script(connection, log)
                    close(connection)
                }.start()
            }
        }.start()
    }

    deinit {
        // shutdown wakes the accept that close alone would leave blocked.
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    var base: String { "http://127.0.0.1:\(port)" }

    var notes: [String] { log.all }

    /// The request head and its Content-Length of body, read from the socket.
    static func readRequest(_ fd: Int32) -> String {
        var bytes: [UInt8] = []
        var byte: UInt8 = 0
        while recv(fd, &byte, 1, 0) == 1 {
            bytes.append(byte)
            if bytes.count >= 4 && bytes.suffix(4) == [13, 10, 13, 10] { break }
        }
        let head = String(decoding: bytes, as: UTF8.self)
        let length =
            head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
            .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
        var body = [UInt8](repeating: 0, count: length)
        var got = 0
        while got < length {
            let n = body.withUnsafeMutableBytes { recv(fd, $0.baseAddress! + got, length - got, 0) }
            if n <= 0 { break }
            got += n
        }
        return head + String(decoding: body[0..<got], as: UTF8.self)
    }

    static func write(_ fd: Int32, _ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// Whether the client closed the connection (EOF or reset) within `seconds`.
    static func seesClose(_ fd: Int32, within seconds: Double) -> Bool {
        var timeout = timeval(tv_sec: Int(seconds), tv_usec: Int((seconds - Double(Int(seconds))) * 1_000_000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var byte: UInt8 = 0
        while true {
            let n = recv(fd, &byte, 1, 0)
            if n == 0 { return true }
            if n < 0 { return errno == ECONNRESET }
        }
    }
}

/// Polls a condition of the server's notes.
private func eventually(_ condition: @escaping () -> Bool) async -> Bool {
    await waitUntil(timeoutMs: 5_000, pollMs: 10) { condition() }
}

private let transport = PlainHTTPTransport()

@Suite struct PlainHTTPTransportSpeaksHTTP {
    @Test func sendsTheRequestAsHTTP11WithHostAgentAndLength() async throws {
        let server = try ScriptedTCPServer { fd, server in
            server.note(ScriptedTCPServer.readRequest(fd))
            ScriptedTCPServer.write(fd, "HTTP/1.1 201 Created\r\nContent-Length: 5\r\n\r\nmade!")
        }
        let response = try await transport.perform(
            HTTPRequest(
                method: "POST", url: server.base + "/tasks?x=1#frag", headers: [("content-type", "application/json")], body: Array("{\"a\":1}".utf8)))
        #expect(response.status == 201)
        #expect(response.body == Array("made!".utf8))
        #expect(response.durationMicroseconds > 0)
        let request = try #require(server.notes.first)
        #expect(request.hasPrefix("POST /tasks?x=1 HTTP/1.1\r\nHost: 127.0.0.1:\(server.port)\r\nUser-Agent: edgecoder-worker\r\n"), "\(request)")
        #expect(request.contains("\r\ncontent-type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}"), "\(request)")
    }

    @Test func readsABodyDelimitedByTheClose() async throws {
        let server = try ScriptedTCPServer { fd, _ in
            _ = ScriptedTCPServer.readRequest(fd)
            ScriptedTCPServer.write(fd, "HTTP/1.0 200 OK\r\nServer: old\r\n\r\nuntil ")
            usleep(50_000)
            ScriptedTCPServer.write(fd, "the end")
        }
        let response = try await transport.perform(HTTPRequest(url: server.base + "/"))
        #expect(response.status == 200)
        #expect(String(decoding: response.body, as: UTF8.self) == "until the end")
    }

    @Test func skipsAn100ContinueBeforeTheAnswer() async throws {
        let server = try ScriptedTCPServer { fd, _ in
            _ = ScriptedTCPServer.readRequest(fd)
            ScriptedTCPServer.write(fd, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        }
        let response = try await transport.perform(HTTPRequest(method: "POST", url: server.base + "/", body: [1]))
        #expect(response.status == 200 && response.body == Array("ok".utf8))
    }

    @Test func aHEADAnswerEndsAtItsHeadWhileTheServerKeepsTheConnection() async throws {
        let server = try ScriptedTCPServer { fd, _ in
            _ = ScriptedTCPServer.readRequest(fd)
            ScriptedTCPServer.write(fd, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
            _ = ScriptedTCPServer.seesClose(fd, within: 10)
        }
        let response = try await transport.perform(HTTPRequest(method: "HEAD", url: server.base + "/", totalTimeoutMs: 5_000))
        #expect(response.status == 200 && response.body.isEmpty)
    }

    @Test func streamsEachPieceWhileTheServerIsStillWriting() async throws {
        // The server writes its second piece only once the client has the first: the
        // test cannot pass unless pieces reach the reader as they arrive.
        let firstArrived = HitCounter()
        let server = try ScriptedTCPServer { fd, server in
            _ = ScriptedTCPServer.readRequest(fd)
            ScriptedTCPServer.write(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n")
            ScriptedTCPServer.write(fd, "c\r\n{\"piece\":0}\n\r\n")
            for _ in 0..<500 where firstArrived.count == 0 { usleep(10_000) }
            server.note(firstArrived.count > 0 ? "second sent after the first arrived" : "the first never arrived")
            ScriptedTCPServer.write(fd, "c\r\n{\"piece\":1}\n\r\n0\r\n\r\n")
        }
        let response = try await transport.stream(HTTPRequest(url: server.base + "/api/chat"))
        #expect(response.status == 200)
        var pieces: [String] = []
        for try await piece in response.body {
            pieces.append(String(decoding: piece, as: UTF8.self))
            firstArrived.increment()
        }
        #expect(pieces == ["{\"piece\":0}\n", "{\"piece\":1}\n"])
        #expect(server.notes == ["second sent after the first arrived"])
    }

    @Test func aStreamThatEndsBeforeAnyBodyIsEmpty() async throws {
        let server = try ScriptedTCPServer { fd, _ in
            _ = ScriptedTCPServer.readRequest(fd)
            ScriptedTCPServer.write(fd, "HTTP/1.1 204 No Content\r\n\r\n")
        }
        let response = try await transport.stream(HTTPRequest(url: server.base + "/"))
        #expect(response.status == 204)
        #expect(try await response.collect(limit: 100).isEmpty)
    }

    @Test func aBrokenAnswerIsATransferErrorNamingTheServer() async throws {
        let server = try ScriptedTCPServer { fd, _ in
            _ = ScriptedTCPServer.readRequest(fd)
            ScriptedTCPServer.write(fd, "SSH-2.0-OpenSSH_9.2p1\r\n")
        }
        await #expect {
            _ = try await transport.perform(HTTPRequest(url: server.base + "/"))
        } throws: { error in
            guard let error = error as? HTTPError else { return false }
            return error.kind == .transfer && error.message.contains("127.0.0.1 port \(server.port)") && error.message.contains("SSH-2.0")
        }
    }

    @Test func aServerClosingWithoutAnAnswerIsATransferError() async throws {
        let server = try ScriptedTCPServer { fd, _ in _ = ScriptedTCPServer.readRequest(fd) }
        await #expect {
            _ = try await transport.perform(HTTPRequest(url: server.base + "/"))
        } throws: { error in
            (error as? HTTPError)?.kind == .transfer && (error as? HTTPError)?.message.contains("without answering") == true
        }
    }

    @Test func aChunkedStreamOverTheLimitOpensThenFailsTooLarge() async throws {
        let server = try ScriptedTCPServer { fd, _ in
            _ = ScriptedTCPServer.readRequest(fd)
            ScriptedTCPServer.write(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for _ in 0..<10 { ScriptedTCPServer.write(fd, "64\r\n" + String(repeating: "x", count: 100) + "\r\n") }
            ScriptedTCPServer.write(fd, "0\r\n\r\n")
        }
        let response = try await transport.stream(HTTPRequest(url: server.base + "/", maxResponseBytes: 450))
        #expect(response.status == 200)
        var received = 0
        await #expect {
            for try await piece in response.body { received += piece.count }
        } throws: { ($0 as? HTTPError)?.kind == .responseTooLarge }
        #expect(received <= 450)
        await #expect {
            _ = try await transport.perform(HTTPRequest(url: server.base + "/", maxResponseBytes: 450))
        } throws: { ($0 as? HTTPError)?.kind == .responseTooLarge }
    }
}

@Suite struct PlainHTTPTransportFailures {
    @Test func aPortWithNothingListeningIsCouldNotConnectNamingHostAndPort() async throws {
        // A port just freed: nothing listens on it.
        let port = try ScriptedTCPServer { _, _ in }.port
        await #expect {
            _ = try await transport.perform(HTTPRequest(url: "http://127.0.0.1:\(port)/", connectTimeoutMs: 1_000))
        } throws: { error in
            guard let error = error as? HTTPError else { return false }
            return error.kind == .couldNotConnect && error.message == "cannot connect to 127.0.0.1 port \(port): Connection refused"
        }
    }

    @Test func anUnresolvableNameIsCouldNotResolve() async throws {
        await #expect {
            _ = try await transport.perform(HTTPRequest(url: "http://no-such-host.invalid:11434/", connectTimeoutMs: 10_000))
        } throws: { error in
            guard let error = error as? HTTPError else { return false }
            return error.kind == .couldNotResolve && error.message.hasPrefix("could not resolve host no-such-host.invalid: ")
        }
    }

    @Test func localhostIsResolvedByName() async throws {
        let server = try ScriptedTCPServer { fd, _ in
            _ = ScriptedTCPServer.readRequest(fd)
            ScriptedTCPServer.write(fd, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        }
        #expect(try await transport.perform(HTTPRequest(url: "http://localhost:\(server.port)/")).status == 200)
    }

    @Test func aServerThatNeverAnswersEndsAtTheTotalTimeout() async throws {
        let server = try ScriptedTCPServer { fd, server in
            _ = ScriptedTCPServer.readRequest(fd)
            server.note(ScriptedTCPServer.seesClose(fd, within: 10) ? "closed" : "still open")
        }
        let started = Date()
        await #expect {
            _ = try await transport.perform(HTTPRequest(url: server.base + "/", totalTimeoutMs: 300))
        } throws: { error in
            guard let error = error as? HTTPError else { return false }
            return error.kind == .timedOut && error.message == "no complete answer from 127.0.0.1 port \(server.port) within 300 ms"
        }
        let took = Date().timeIntervalSince(started)
        #expect(took >= 0.29 && took < 3, "\(took) s")
        #expect(await eventually { server.notes == ["closed"] })
    }

    @Test func aFullListenQueueEndsAtTheConnectTimeout() async throws {
        // A listener that never accepts, its queue full: the kernel drops further SYNs,
        // so a connect hangs as to a host that does not answer.
        let blocker = try LoopbackListenerThatNeverAccepts()
        var fillers: [Int32] = []
        defer { fillers.forEach { close($0) } }
        for _ in 0..<4 { fillers.append(blocker.connectWithoutWaiting()) }
        let started = Date()
        await #expect {
            _ = try await transport.perform(HTTPRequest(url: "http://127.0.0.1:\(blocker.port)/", connectTimeoutMs: 300, totalTimeoutMs: 5_000))
        } throws: { error in
            guard let error = error as? HTTPError else { return false }
            return error.kind == .timedOut && error.message.hasPrefix("connecting to 127.0.0.1 port \(blocker.port) timed out after")
        }
        #expect(Date().timeIntervalSince(started) < 3)
    }

    @Test func cancellingAWaitingRequestClosesItsConnectionAtOnce() async throws {
        let server = try ScriptedTCPServer { fd, server in
            _ = ScriptedTCPServer.readRequest(fd)
            server.note("asked")
            server.note(ScriptedTCPServer.seesClose(fd, within: 10) ? "closed" : "still open")
        }
        let url = server.base + "/slow"
        let task = Task { try await transport.perform(HTTPRequest(url: url, totalTimeoutMs: 20_000)) }
        #expect(await eventually { server.notes == ["asked"] })
        let started = Date()
        task.cancel()
        await #expect(throws: CancellationError.self) { try await task.value }
        #expect(Date().timeIntervalSince(started) < 1)
        #expect(await eventually { server.notes == ["asked", "closed"] })
    }

    @Test func cancellingTheTaskReadingAStreamClosesTheConnection() async throws {
        let server = try ScriptedTCPServer { fd, server in
            _ = ScriptedTCPServer.readRequest(fd)
            ScriptedTCPServer.write(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
            server.note(ScriptedTCPServer.seesClose(fd, within: 10) ? "closed" : "still open")
        }
        let url = server.base + "/"
        let firstSeen = HitCounter()
        let task = Task {
            for try await _ in try await transport.stream(HTTPRequest(url: url, totalTimeoutMs: 20_000)).body { firstSeen.increment() }
        }
        #expect(await eventually { firstSeen.count > 0 })
        task.cancel()
        _ = try? await task.value
        #expect(await eventually { server.notes == ["closed"] })
    }

    @Test func breakingOutOfAStreamClosesTheConnection() async throws {
        let server = try ScriptedTCPServer { fd, server in
            _ = ScriptedTCPServer.readRequest(fd)
            ScriptedTCPServer.write(fd, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
            server.note(ScriptedTCPServer.seesClose(fd, within: 10) ? "closed" : "still open")
        }
        // As with libcurl, the end of the iteration is the end of the stream once nothing
        // else holds it (AsyncThrowingStream ends when its last iterator and value go).
        for try await _ in try await transport.stream(HTTPRequest(url: server.base + "/", totalTimeoutMs: 20_000)).body { break }
        #expect(await eventually { server.notes == ["closed"] })
    }

    @Test func noThreadOfTheClientOutlivesItsRequests() async throws {
        let server = try ScriptedTCPServer { fd, _ in
            _ = ScriptedTCPServer.readRequest(fd)
            ScriptedTCPServer.write(fd, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        }
        for _ in 0..<5 { _ = try await transport.perform(HTTPRequest(url: "http://localhost:\(server.port)/")) }
        #expect(await eventually { threadNames().allSatisfy { $0 != "ecw-http-plain" && $0 != "ecw-resolve" } }, "\(threadNames())")
    }
}

/// The names of this process's threads.
private func threadNames() -> [String] {
    (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task"))?.compactMap { task in
        (try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
    } ?? []
}

/// A blocking TCP socket listening on 127.0.0.1 at a free port, and that port.
private func listenOnLoopback(backlog: Int32) throws -> (fd: Int32, port: UInt16) {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard bound == 0, listen(fd, backlog) == 0 else {
        close(fd)
        throw POSIXError(.EADDRINUSE)
    }
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
    return (fd, UInt16(bigEndian: address.sin_port))
}

/// A loopback listener with a queue of one that never accepts.
private final class LoopbackListenerThatNeverAccepts {
    let fd: Int32
    let port: UInt16

    init() throws {
        (fd, port) = try listenOnLoopback(backlog: 0)
    }

    deinit { close(fd) }

    /// A non-blocking connect that fills the queue (or waits in SYN_SENT once it is full).
    func connectWithoutWaiting() -> Int32 {
        let client = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        _ = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(client, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        usleep(20_000)
        return client
    }
}
