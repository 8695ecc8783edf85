import Foundation
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif
@testable import HTTP
import Logging
import Posix
import Synchronization

/// Ends a child the tests started, for sure, and waits (bounded) until it is reaped.
/// Foundation's `Process` hands the test runner's blocked signal mask to its children,
/// SIGTERM included, so `terminate()` may do nothing and leave the child running after
/// the tests (hardening #26 row 15); SIGKILL can be neither blocked nor ignored.
@discardableResult
func endChild(_ process: Process, timeoutMs: Int = 5_000) -> Bool {
    guard process.processIdentifier > 0 else { return true }
    if process.isRunning { kill(process.processIdentifier, SIGKILL) }
    for _ in 0..<(timeoutMs / 10) where process.isRunning { usleep(10_000) }
    return !process.isRunning
}

@Suite struct ChildrenOfTheTests {
    @Test func aChildThatDoesNotHeedSIGTERMIsStillEnded() throws {
        let child = Process()
        child.executableURL = URL(fileURLWithPath: "/bin/sh")
        // Ignored, as a blocked mask inherited from the runner would leave it.
        child.arguments = ["-c", "trap '' TERM; exec sleep 600"]
        try child.run()
        usleep(100_000)
        #expect(endChild(child), "pid \(child.processIdentifier) still runs")
    }
}

/// A tiny HTTP server on loopback, written with Python's standard library, so the
/// client is tested against a real server over a real socket.
final class LoopbackServer {
    let process = Process()
    let port: Int

    init() throws {
        let script = #"""
            import http.server, json, sys, time, socketserver
            ABORTED = [0]
            class H(http.server.BaseHTTPRequestHandler):
                protocol_version = "HTTP/1.1"
                def log_message(self, *a): pass
                def reply(self, status, body, ctype="application/json"):
                    self.send_response(status); self.send_header("content-type", ctype)
                    self.send_header("content-length", str(len(body))); self.end_headers(); self.wfile.write(body)
                def do_GET(self):
                    if self.path == "/big": self.reply(200, b"x" * 3_000_000)
                    elif self.path == "/slow": time.sleep(10); self.reply(200, b"{}")
                    elif self.path == "/status/503": self.reply(503, b'{"error":"busy"}')
                    elif self.path.startswith("/drip/"):
                        count = int(self.path.split("/")[2])
                        self.send_response(200); self.send_header("content-type", "application/x-ndjson")
                        self.send_header("transfer-encoding", "chunked"); self.end_headers()
                        try:
                            for i in range(count):
                                if i: time.sleep(0.15)
                                data = b"piece %d\n" % i
                                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data)); self.wfile.flush()
                            self.wfile.write(b"0\r\n\r\n")
                        except (BrokenPipeError, ConnectionResetError):
                            ABORTED[0] += 1
                            self.close_connection = True
                    elif self.path == "/aborted": self.reply(200, str(ABORTED[0]).encode())
                    else: self.reply(404, b'{"error":"not found"}')
                def do_POST(self):
                    n = int(self.headers.get("content-length", 0)); body = self.rfile.read(n)
                    echo = {"method": "POST", "path": self.path, "body": body.decode(), "token": self.headers.get("x-mesh-token"),
                            "type": self.headers.get("content-type"), "agent": self.headers.get("user-agent")}
                    self.reply(200, json.dumps(echo).encode())
            class S(socketserver.ThreadingMixIn, http.server.HTTPServer): daemon_threads = True
            s = S(("127.0.0.1", 0), H); print(s.server_address[1], flush=True); s.serve_forever()
            """#
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", "-c", script]
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        var line = Data()
        while !line.contains(0x0A) {
            let chunk = out.fileHandleForReading.availableData
            if chunk.isEmpty { break }
            line.append(chunk)
        }
        guard let port = Int(String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) else {
            throw URLError(.cannotConnectToHost)
        }
        self.port = port
    }

    deinit {
        // Foundation's waitUntilExit can spin on Linux; poll instead, with a bound.
        endChild(process, timeoutMs: 2_000)
    }
    var base: String { "http://127.0.0.1:\(port)" }
}

/// Each transport the worker has, against the same real servers: the worker's own
/// HTTP/1.1 client (what `HTTPClient.shared` uses for http://) and libcurl (https://,
/// proxies), which must behave alike.
enum TransportUnderTest: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case plain, libcurl

    static let plainTransport = PlainHTTPTransport()
    static let curlTransport = CurlTransport()

    var transport: any HTTPTransport {
        switch self {
        case .plain: Self.plainTransport
        case .libcurl: Self.curlTransport
        }
    }

    var testDescription: String { rawValue }
}

@Suite(.serialized) struct HTTPClientAgainstALoopbackServer {
    let server: LoopbackServer
    init() throws { server = try LoopbackServer() }

    @Test(arguments: TransportUnderTest.allCases) func postsABodyWithHeadersAndReadsTheAnswer(via: TransportUnderTest) async throws {
        let body = Array(#"{"agentId":"a"}"#.utf8)
        let response = try await via.transport.perform(
            HTTPRequest(
                method: "POST", url: server.base + "/register",
                headers: [("content-type", "application/json"), ("x-mesh-token", "tok")], body: body))
        #expect(response.status == 200)
        let echo = try JSONSerialization.jsonObject(with: Data(response.body)) as? [String: Any]
        #expect(echo?["body"] as? String == #"{"agentId":"a"}"#)
        #expect(echo?["token"] as? String == "tok")
        #expect(echo?["type"] as? String == "application/json")
        #expect((echo?["agent"] as? String)?.hasPrefix("edgecoder-worker") == true)
    }

    @Test(arguments: TransportUnderTest.allCases) func returnsErrorStatusesAsAnswers(via: TransportUnderTest) async throws {
        let response = try await via.transport.perform(HTTPRequest(url: server.base + "/status/503"))
        #expect(response.status == 503)
    }

    @Test(arguments: TransportUnderTest.allCases) func capsTheResponseBody(via: TransportUnderTest) async throws {
        do {
            _ = try await via.transport.perform(HTTPRequest(url: server.base + "/big", maxResponseBytes: 1_048_576))
            Issue.record("a 3 MB answer passed a 1 MiB cap")
        } catch let error as HTTPError {
            #expect(error.kind == .responseTooLarge)
        }
        let big = try await via.transport.perform(HTTPRequest(url: server.base + "/big", maxResponseBytes: 4_000_000))
        #expect(big.body.count == 3_000_000)
    }

    @Test(arguments: TransportUnderTest.allCases) func theTotalTimeoutHolds(via: TransportUnderTest) async throws {
        let started = Date()
        do {
            _ = try await via.transport.perform(HTTPRequest(url: server.base + "/slow", totalTimeoutMs: 300))
            Issue.record("a 10 s answer beat a 300 ms timeout")
        } catch let error as HTTPError {
            #expect(error.kind == .timedOut)
        }
        #expect(Date().timeIntervalSince(started) < 8, "the timeout, not the 10 s answer, ended it")
    }

    @Test(arguments: TransportUnderTest.allCases) func cancellationEndsATransferAtOnce(via: TransportUnderTest) async throws {
        let url = server.base + "/slow"
        let task = Task { try await via.transport.perform(HTTPRequest(url: url, totalTimeoutMs: 10_000)) }
        try await Task.sleep(nanoseconds: 200_000_000)
        let started = Date()
        task.cancel()
        do {
            _ = try await task.value
            Issue.record("a cancelled transfer completed")
        } catch {
            #expect(error is CancellationError)
        }
        #expect(Date().timeIntervalSince(started) < 8, "cancellation, not the 10 s answer, ended it")
    }

    @Test(arguments: TransportUnderTest.allCases) func aStreamDeliversEachChunkAsItArrives(via: TransportUnderTest) async throws {
        let start = Date()
        let response = try await via.transport.stream(HTTPRequest(url: server.base + "/drip/5"))
        #expect(response.status == 200)
        var chunks: [(String, TimeInterval)] = []
        for try await chunk in response.body { chunks.append((String(decoding: chunk, as: UTF8.self), Date().timeIntervalSince(start))) }
        #expect(chunks.map(\.0).joined() == (0..<5).map { "piece \($0)\n" }.joined())
        let first = try #require(chunks.first?.1), last = try #require(chunks.last?.1)
        // Five pieces 150 ms apart: the first long before the last.
        #expect(last >= 0.55 && first < last - 0.4, "first at \(first) s, last at \(last) s")
    }

    @Test(arguments: TransportUnderTest.allCases) func endingAStreamEarlyAbortsTheTransferSoTheServerSeesTheClientLeave(via: TransportUnderTest)
        async throws
    {
        let before = try await via.transport.perform(HTTPRequest(url: server.base + "/aborted")).body
        var seen = 0
        for try await _ in try await via.transport.stream(HTTPRequest(url: server.base + "/drip/100")).body {
            seen += 1
            if seen == 2 { break }
        }
        var aborted = before
        for _ in 0..<40 where aborted == before {
            try await Task.sleep(nanoseconds: 100_000_000)
            aborted = try await via.transport.perform(HTTPRequest(url: server.base + "/aborted")).body
        }
        #expect(
            Int(String(decoding: aborted, as: UTF8.self)) == Int(String(decoding: before, as: UTF8.self))! + 1,
            "the server's next write failed: the connection was closed")
    }

    @Test(arguments: TransportUnderTest.allCases) func cancellingTheReadingTaskEndsTheStream(via: TransportUnderTest) async throws {
        let url = server.base + "/drip/100"
        let task = Task { () -> Int in
            var count = 0
            for try await _ in try await via.transport.stream(HTTPRequest(url: url)).body { count += 1 }
            return count
        }
        try await Task.sleep(nanoseconds: 400_000_000)
        let started = Date()
        task.cancel()
        let count = (try? await task.value) ?? 0
        #expect(count < 100)
        #expect(Date().timeIntervalSince(started) < 3, "cancellation, not the 15 s stream, ended it")
    }

    @Test(arguments: TransportUnderTest.allCases) func aStreamedErrorStatusAndItsBodyArrive(via: TransportUnderTest) async throws {
        let response = try await via.transport.stream(HTTPRequest(url: server.base + "/status/503"))
        #expect(response.status == 503)
        #expect(try await response.collect(limit: 1_000) == Array(#"{"error":"busy"}"#.utf8))
    }

    @Test(arguments: TransportUnderTest.allCases) func aStreamIsCappedLikeAWholeAnswer(via: TransportUnderTest) async throws {
        let response = try await via.transport.stream(HTTPRequest(url: server.base + "/big", maxResponseBytes: 1_048_576))
        do {
            for try await _ in response.body {}
            Issue.record("a 3 MB stream passed a 1 MiB cap")
        } catch let error as HTTPError {
            #expect(error.kind == .responseTooLarge)
        }
    }

    @Test(arguments: TransportUnderTest.allCases) func manyTransfersRunConcurrently(via: TransportUnderTest) async throws {
        let base = server.base
        let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
            for i in 0..<20 {
                group.addTask {
                    try await via.transport.perform(HTTPRequest(method: "POST", url: base + "/n\(i)", body: Array("\(i)".utf8))).status
                }
            }
            return try await group.reduce(into: [Int]()) { $0.append($1) }
        }
        #expect(statuses == Array(repeating: 200, count: 20))
    }
}

@Suite struct HTTPClientFailures {
    @Test func refusedConnectionsAreCouldNotConnect() async throws {
        do {
            _ = try await HTTPClient.shared.perform(HTTPRequest(url: "http://127.0.0.1:9/", connectTimeoutMs: 1_000))
            Issue.record("connected to the discard port")
        } catch let error as HTTPError {
            #expect(error.kind == .couldNotConnect)
        }
    }

    @Test(arguments: ["ftp://127.0.0.1/x", "file:///etc/passwd", "gopher://127.0.0.1/"])
    func onlyHTTPAndHTTPSAreSpoken(url: String) async throws {
        do {
            _ = try await HTTPClient.shared.perform(HTTPRequest(url: url))
            Issue.record("\(url) was fetched")
        } catch let error as HTTPError {
            #expect(error.kind == .badURL)
        }
    }

    @Test func aTLSServerWithAnUntrustedCertificateIsRefused() async throws {
        // openssl s_server with a self-signed certificate: verification must fail.
        let temporary = TemporaryDirectory(prefix: "ecw-tls-")
        defer { temporary.remove() }
        let dir = temporary.path
        let gen = Process()
        gen.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        gen.arguments = [
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", dir + "/k.pem", "-out", dir + "/c.pem", "-days", "1", "-subj",
            "/CN=127.0.0.1",
        ]
        gen.standardError = FileHandle.nullDevice
        try gen.run()
        for _ in 0..<3000 where gen.isRunning { usleep(10_000) }
        endChild(gen)
        let port = Int.random(in: 40_000..<50_000)
        let server = Process()
        server.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        server.arguments = ["s_server", "-accept", "127.0.0.1:\(port)", "-key", dir + "/k.pem", "-cert", dir + "/c.pem", "-www", "-quiet"]
        server.standardOutput = FileHandle.nullDevice
        server.standardError = FileHandle.nullDevice
        try server.run()
        defer { endChild(server) }
        try await Task.sleep(nanoseconds: 500_000_000)
        do {
            _ = try await HTTPClient.shared.perform(HTTPRequest(url: "https://127.0.0.1:\(port)/", connectTimeoutMs: 3_000))
            Issue.record("an untrusted certificate was accepted")
        } catch let error as HTTPError {
            #expect(error.kind == .tls, "\(error)")
        }
    }
}

/// A curl_multi_poll that fails a given number of times, then is the real one; it records
/// when it was called. A mock: curl_multi_poll cannot be made to fail on demand.
private final class FailingMultiPoll: Sendable {
    private let state: Mutex<(failuresLeft: Int, calls: [UInt64])>

    init(failures: Int) { state = Mutex((failures, [])) }

    var calls: [UInt64] { state.withLock { $0.calls } }

    func poll(_ multi: UnsafeMutableRawPointer, _ timeoutMs: Int32) -> String? {
        let fail = state.withLock { state -> Bool in
            state.calls.append(monotonicNanoseconds())
            guard state.failuresLeft > 0 else { return false }
            state.failuresLeft -= 1
            return true
        }
        return fail ? "mocked failure" : CurlTransport.curlMultiPoll(multi, timeoutMs)
    }
}

@Suite struct HTTPClientPollFailureTests {
    @Test func mockedMultiPollFailureBacksOffLogsOnceAndTransfersStillEnd() async throws {
        let server = try LoopbackServer()
        let failing = FailingMultiPoll(failures: 3)
        let log = MemoryLogHandler()
        let client = CurlTransport(multiPoll: { failing.poll($0, $1) }, logger: Logger(label: "http", handler: log))
        let response = try await client.perform(HTTPRequest(url: server.base + "/status/503"))
        #expect(response.status == 503)
        // The transfer may end before the failures do; let them run out, then wake the
        // wait that works with a second request, so its success is seen and logged.
        for _ in 0..<300 where failing.calls.count < 4 { try await Task.sleep(nanoseconds: 10_000_000) }
        #expect(try await client.perform(HTTPRequest(url: server.base + "/status/503")).status == 503)

        let calls = failing.calls
        #expect(calls.count >= 4)
        for index in 0..<min(3, calls.count - 1) {
            #expect(calls[index + 1] - calls[index] >= FailureBackoff.firstPauseNanoseconds << UInt64(index))
        }
        let errors = log.records.filter { $0.level == .error }
        #expect(errors.map(\.message) == ["curl_multi_poll failed: mocked failure; retrying, with pauses growing to 1000 ms, until it works"])
        #expect(log.records.filter { $0.level == .notice }.map(\.message) == ["curl_multi_poll works again after 3 failed tries"])
    }
}
