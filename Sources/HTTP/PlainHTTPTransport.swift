#if canImport(Glibc)
import Glibc
#endif
import Posix
import Synchronization

/// The worker's own HTTP/1.1 client for `http://` URLs, framed by `HTTPResponseReader`,
/// with keep-alive: a connection whose answer ended cleanly waits in `pool` for the next
/// request to the same host and port (a coordinator's subtasks come back to back).
///
/// Each request runs on a thread of its own (`startDetachedThread`), which takes an idle
/// connection or resolves the name and connects, sends, and waits in poll(2) on the socket
/// and an eventfd; the thread ends with its request, so an idle worker holds no thread for
/// HTTP (a parked one would keep its stack and malloc arena resident for the minutes
/// between requests, and one thread for all would let one slow name lookup hold up the
/// others). Cancelling the calling task, or a stream's reader leaving, signals the
/// eventfd: the thread closes the connection at once, so the server sees the client
/// leave; such a connection, like one that failed or timed out, never goes back to the pool.
public final class PlainHTTPTransport: HTTPTransport {
    let pool: PlainConnectionPool

    public convenience init() { self.init(pool: PlainConnectionPool()) }

    init(pool: PlainConnectionPool) { self.pool = pool }

    public func perform(_ request: HTTPRequest) async throws -> HTTPResponse {
        try await exchange(request, streaming: false) { .whole($0) }
    }

    public func stream(_ request: HTTPRequest) async throws -> HTTPStreamResponse {
        try await exchange(request, streaming: true) { .stream($0) }
    }

    private func exchange<Answer>(
        _ request: HTTPRequest, streaming: Bool, _ waiter: (CheckedContinuation<Answer, any Error>) -> HTTPWaiter
    ) async throws -> Answer {
        let started = monotonicNanoseconds()
        let url = try PlainHTTPURL(request.url)
        let transfer = PlainTransfer(
            url: url, bytes: try PlainHTTPRequestHead.bytes(of: request, to: url), request: request, streaming: streaming,
            exchange: try PlainExchange(), pool: pool, started: started)
        let exchange = transfer.exchange
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Answer, any Error>) in
                guard exchange.begin(waiter(continuation)) else { return }
                do {
                    try startDetachedThread(named: "ecw-http-plain") { transfer.run() }
                } catch {
                    exchange.fail(HTTPError(kind: .transfer, message: "cannot start a thread for the request to \(request.url): \(error)"))
                }
            }
        } onCancel: {
            exchange.abort(CancellationError())
        }
    }
}

/// What the caller's side and a request's thread share: who waits for the answer, the
/// body stream once opened, and the eventfd that wakes the thread's poll when the
/// request is aborted (or its name resolved).
final class PlainExchange: Sendable {
    private struct State {
        var waiter: HTTPWaiter?
        var body: AsyncThrowingStream<[UInt8], any Error>.Continuation?
        var isAborted = false
    }

    private let state = Mutex(State())
    let wake: WakeEvent

    init() throws(HTTPError) {
        wake = WakeEvent()
        guard wake.fileDescriptor >= 0 else {
            throw HTTPError(kind: .transfer, message: "cannot create an eventfd for an HTTP request: \(String(cString: strerror(errno)))")
        }
    }

    var isAborted: Bool { state.withLock { $0.isAborted } }

    /// Installs who waits; false when the request was aborted before (the waiter is then
    /// resumed with CancellationError here and no thread starts).
    func begin(_ waiter: HTTPWaiter) -> Bool {
        let aborted = state.withLock { state -> Bool in
            if !state.isAborted { state.waiter = waiter }
            return state.isAborted
        }
        if aborted { waiter.fail(CancellationError()) }
        return !aborted
    }

    /// Ends the request now: whoever waits gets `error`, the thread wakes, closes the
    /// connection and ends. From any thread or task.
    func abort(_ error: any Error) {
        state.withLock { $0.isAborted = true }
        fail(error)
        wake.signal()
    }

    /// A stream's status is known: its caller gets the status and a body stream. False
    /// when the request was aborted.
    func openStream(status: Int) -> Bool {
        let (body, chunks) = AsyncThrowingStream<[UInt8], any Error>.makeStream()
        let waiter = state.withLock { state -> HTTPWaiter? in
            guard !state.isAborted, case .stream? = state.waiter else { return nil }
            defer { state.waiter = nil }
            state.body = chunks
            return state.waiter
        }
        guard case .stream(let continuation)? = waiter else { return false }
        // The reader leaving (ending its iteration, or its task cancelled) aborts the request.
        chunks.onTermination = { [weak self] termination in
            if case .cancelled = termination { self?.abort(CancellationError()) }
        }
        continuation.resume(returning: HTTPStreamResponse(status: status, body: body))
        return true
    }

    /// Hands a piece of a stream's body to its reader; false once the reader is gone.
    func yield(_ piece: [UInt8]) -> Bool {
        guard let body = state.withLock({ $0.body }) else { return false }
        if case .terminated = body.yield(piece) { return false }
        return true
    }

    /// The answer is complete: the whole one to `perform`'s caller, or the end of a stream
    /// (opened now if it ended before the status went out).
    func complete(_ response: HTTPResponse) {
        if case .stream? = state.withLock({ $0.waiter }), !openStream(status: response.status) { return }
        let (waiter, body) = state.withLock { state in
            defer {
                state.waiter = nil
                state.body = nil
            }
            return (state.waiter, state.body)
        }
        if case .whole(let continuation)? = waiter { continuation.resume(returning: response) }
        body?.finish()
    }

    /// The request failed: its waiter, or its stream's reader, gets `error`.
    func fail(_ error: any Error) {
        let (waiter, body) = state.withLock { state in
            defer {
                state.waiter = nil
                state.body = nil
            }
            return (state.waiter, state.body)
        }
        waiter?.fail(error)
        body?.finish(throwing: error)
    }
}

/// One request on its own thread: everything here blocks, in poll(2) with the exchange's
/// eventfd beside the socket, never longer than the request's deadlines.
struct PlainTransfer: Sendable {
    let url: PlainHTTPURL
    let bytes: [UInt8]
    let request: HTTPRequest
    let streaming: Bool
    let exchange: PlainExchange
    let pool: PlainConnectionPool
    /// CLOCK_MONOTONIC nanoseconds when the caller asked.
    let started: UInt64

    /// Why the thread stops early: aborted (the waiter was answered by `abort`), or an error.
    enum Stop: Error {
        case aborted
        case failed(HTTPError)
        /// A reused connection ended before any byte of the answer: its server had closed
        /// it, maybe just as the request went out. Worth one try on a new connection.
        case closedBeforeAnswering(HTTPError)
    }

    /// An answer, and whether its connection may carry the next request.
    struct Answer {
        var response: HTTPResponse
        var keepsConnection: Bool
    }

    private var peer: String { "\(url.host) port \(url.port)" }

    private func deadline(afterMs ms: Int64) -> UInt64 { started + UInt64(max(0, ms)) * 1_000_000 }

    private var totalDeadline: UInt64 { deadline(afterMs: request.totalTimeoutMs) }
    /// libcurl's connect timeout covers the name lookup too; the total one bounds both.
    private var connectDeadline: UInt64 { min(totalDeadline, deadline(afterMs: request.connectTimeoutMs)) }

    private var peerInPool: PlainConnectionPool.Peer { .init(host: url.host, port: url.port) }

    func run() {
        var fd: Int32 = -1
        let outcome: Result<Answer, Stop>
        do throws(Stop) {
            outcome = .success(try answer(&fd))
        } catch {
            outcome = .failure(error)
        }
        // Closed, or back in the pool, before anyone hears of the end: the server has seen
        // the close by then, and the caller's next request finds the connection.
        if fd >= 0 {
            if case .success(let answer) = outcome, answer.keepsConnection, !exchange.isAborted {
                pool.putBack(fd, for: peerInPool)
            } else {
                close(fd)
            }
        }
        switch outcome {
        case .success(let answer): exchange.complete(answer.response)
        case .failure(.aborted): break
        case .failure(.failed(let error)), .failure(.closedBeforeAnswering(let error)): exchange.fail(error)
        }
    }

    /// The answer on an idle connection from the pool if there is one, else on a new one;
    /// `fd` is the connection in use. A reused connection that ends before any byte of the
    /// answer is retried once on a new connection (libcurl does the same), never after a
    /// byte arrived.
    private func answer(_ fd: inout Int32) throws(Stop) -> Answer {
        if let idle = pool.take(peerInPool) {
            fd = idle
            do throws(Stop) {
                return try exchangeBytes(fd, isReused: true)
            } catch .closedBeforeAnswering {
                close(fd)
                fd = -1
            }
        }
        let addresses = try resolve()
        fd = try connect(addresses)
        return try exchangeBytes(fd, isReused: false)
    }

    /// Waits until `fd` (or nothing, with -1) is ready for `events`, or the eventfd fired.
    /// Returns whether `fd` is ready; throws when aborted or `deadline` passed.
    private func wait(_ fd: Int32, _ events: Int16, until deadline: UInt64, _ timeout: @autoclosure () -> String) throws(Stop) -> Bool {
        while true {
            if exchange.isAborted { throw .aborted }
            let now = monotonicNanoseconds()
            if now >= deadline { throw .failed(HTTPError(kind: .timedOut, message: timeout())) }
            // Rounded up, so a deadline is never reported before it has passed.
            let timeoutMs = Int32(clamping: (deadline - now + 999_999) / 1_000_000)
            var fds = [pollfd(fd: fd, events: events, revents: 0), pollfd(fd: exchange.wake.fileDescriptor, events: Int16(POLLIN), revents: 0)]
            let rc = poll(&fds, 2, timeoutMs)
            if rc < 0 {
                let code = errno
                if code == EINTR { continue }
                preconditionErrnoIsNotABug(code, call: "poll")
                throw .failed(HTTPError(kind: .transfer, message: "poll failed while talking to \(peer): \(String(cString: strerror(code)))"))
            }
            if fds[1].revents != 0 {
                exchange.wake.drain()
                if exchange.isAborted { throw .aborted }
                return fds[0].revents != 0
            }
            if fds[0].revents != 0 { return true }
        }
    }

    private func elapsedMs() -> UInt64 { (monotonicNanoseconds() - started) / 1_000_000 }

    // MARK: name

    /// An address as getaddrinfo gave it.
    struct SocketAddress: Sendable {
        var family: Int32
        var bytes: [UInt8]

        var text: String {
            var buffer = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
            bytes.withUnsafeBytes { raw in
                if family == AF_INET {
                    var address = raw.loadUnaligned(as: sockaddr_in.self).sin_addr
                    _ = inet_ntop(AF_INET, &address, &buffer, socklen_t(buffer.count))
                } else {
                    var address = raw.loadUnaligned(as: sockaddr_in6.self).sin6_addr
                    _ = inet_ntop(AF_INET6, &address, &buffer, socklen_t(buffer.count))
                }
            }
            return buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        }
    }

    /// getaddrinfo for `host`; `numericOnly` never asks DNS (and so never blocks).
    static func lookUp(_ host: String, port: UInt16, numericOnly: Bool) -> Result<[SocketAddress], HTTPError> {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = numericOnly ? AI_NUMERICHOST | AI_NUMERICSERV : AI_NUMERICSERV
        var list: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, String(port), &hints, &list)
        guard rc == 0, let list else {
            let why = rc == EAI_SYSTEM ? String(cString: strerror(errno)) : String(cString: gai_strerror(rc))
            return .failure(HTTPError(kind: .couldNotResolve, message: "could not resolve host \(host): \(why)"))
        }
        defer { freeaddrinfo(list) }
        var addresses: [SocketAddress] = []
        var next: UnsafeMutablePointer<addrinfo>? = list
        while let entry = next {
            if let address = entry.pointee.ai_addr, entry.pointee.ai_family == AF_INET || entry.pointee.ai_family == AF_INET6 {
                let raw = UnsafeRawBufferPointer(start: address, count: Int(entry.pointee.ai_addrlen))
                addresses.append(SocketAddress(family: entry.pointee.ai_family, bytes: Array(raw)))
            }
            next = entry.pointee.ai_next
        }
        if addresses.isEmpty {
            return .failure(HTTPError(kind: .couldNotResolve, message: "could not resolve host \(host): no IPv4 or IPv6 address"))
        }
        return .success(addresses)
    }

    /// The addresses of the URL's host. A literal address is read at once; a name is
    /// looked up on a thread of its own, which this one waits for (or not: when the
    /// request is aborted or the connect deadline passes, the lookup ends unheard).
    private func resolve() throws(Stop) -> [SocketAddress] {
        if case .success(let addresses) = Self.lookUp(url.host, port: url.port, numericOnly: true) { return addresses }
        let lookup = NameLookup(host: url.host, port: url.port, exchange: exchange)
        do {
            try startDetachedThread(named: "ecw-resolve") { lookup.run() }
        } catch {
            throw .failed(HTTPError(kind: .transfer, message: "cannot start a thread to resolve \(url.host): \(error)"))
        }
        while true {
            if let answer = lookup.answer {
                switch answer {
                case .success(let addresses): return addresses
                case .failure(let error): throw .failed(error)
                }
            }
            _ = try wait(-1, 0, until: connectDeadline, "resolving \(url.host) timed out after \(elapsedMs()) ms")
        }
    }

    /// A name lookup on a thread of its own; its answer stays here for whoever still asks.
    final class NameLookup: Sendable {
        let host: String
        let port: UInt16
        let exchange: PlainExchange
        private let result = Mutex<Result<[SocketAddress], HTTPError>?>(nil)

        init(host: String, port: UInt16, exchange: PlainExchange) {
            self.host = host
            self.port = port
            self.exchange = exchange
        }

        var answer: Result<[SocketAddress], HTTPError>? { result.withLock { $0 } }

        func run() {
            let answer = PlainTransfer.lookUp(host, port: port, numericOnly: false)
            result.withLock { $0 = answer }
            exchange.wake.signal()
        }
    }

    // MARK: connection

    /// Connects to each address in turn (each but the last gets its share of the time
    /// left); returns the connected non-blocking socket.
    private func connect(_ addresses: [SocketAddress]) throws(Stop) -> Int32 {
        var lastError: Int32 = ECONNREFUSED
        for (index, address) in addresses.enumerated() {
            let fd = socket(address.family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            if fd < 0 {
                lastError = errno
                continue
            }
            let rc = address.bytes.withUnsafeBytes { raw in
                Glibc.connect(fd, raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), socklen_t(raw.count))
            }
            if rc == 0 { return fd }
            let code = errno
            guard code == EINPROGRESS || code == EINTR else {
                close(fd)
                lastError = code
                continue
            }
            let now = monotonicNanoseconds()
            let isLast = index == addresses.count - 1
            let share = isLast || now >= connectDeadline ? connectDeadline : now + (connectDeadline - now) / UInt64(addresses.count - index)
            do throws(Stop) {
                while try !wait(fd, Int16(POLLOUT), until: share, "connecting to \(peer) timed out after \(elapsedMs()) ms") {}
            } catch .failed(let error) where error.kind == .timedOut && !isLast {
                close(fd)
                lastError = ETIMEDOUT
                continue
            } catch {
                close(fd)
                throw error
            }
            var soError: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &soError, &length)
            if soError == 0 { return fd }
            close(fd)
            lastError = soError
        }
        let tried = url.host.contains(where: { $0.isLetter }) ? " (\(addresses.map(\.text).joined(separator: ", ")))" : ""
        if lastError == ETIMEDOUT {
            throw .failed(HTTPError(kind: .timedOut, message: "connecting to \(peer)\(tried) timed out after \(elapsedMs()) ms"))
        }
        throw .failed(HTTPError(kind: .couldNotConnect, message: "cannot connect to \(peer)\(tried): \(String(cString: strerror(lastError)))"))
    }

    /// Sends the request, then reads the answer; pieces of a stream's body go to its
    /// reader as they come. On a reused connection (`isReused`), an end before any byte
    /// of the answer is `closedBeforeAnswering`.
    private func exchangeBytes(_ fd: Int32, isReused: Bool) throws(Stop) -> Answer {
        let timeout = { "no complete answer from \(peer) within \(request.totalTimeoutMs) ms" }
        // A server may answer and close before taking the whole body (a 413): its answer
        // then counts, and the failed send only when no answer came.
        var sendFailure: HTTPError?
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            if n >= 0 {
                offset += n
                continue
            }
            let code = errno
            if code == EINTR { continue }
            if code == EAGAIN || code == EWOULDBLOCK {
                _ = try wait(fd, Int16(POLLOUT), until: totalDeadline, timeout())
                continue
            }
            preconditionErrnoIsNotABug(code, call: "send")
            sendFailure = HTTPError(kind: .transfer, message: "sending the request to \(peer) failed: \(String(cString: strerror(code)))")
            break
        }

        var reader = HTTPResponseReader(maxBodyBytes: request.maxResponseBytes, isHeadRequest: request.method == "HEAD")
        var status: Int?
        var receivedAny = false
        var body: [UInt8] = []
        // Sized for the pieces servers write (a model's NDJSON lines, a coordinator's
        // JSON); freed with the request.
        var buffer = [UInt8](repeating: 0, count: 16_384)
        while true {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0 {
                let code = errno
                if code == EINTR { continue }
                if code == EAGAIN || code == EWOULDBLOCK {
                    _ = try wait(fd, Int16(POLLIN), until: totalDeadline, timeout())
                    continue
                }
                preconditionErrnoIsNotABug(code, call: "recv")
                let failure = HTTPError(kind: .transfer, message: "reading the answer from \(peer) failed: \(String(cString: strerror(code)))")
                if isReused, !receivedAny, code == ECONNRESET { throw .closedBeforeAnswering(sendFailure ?? failure) }
                if status == nil, let sendFailure { throw .failed(sendFailure) }
                throw .failed(failure)
            }
            if isReused, !receivedAny, n == 0 {
                throw .closedBeforeAnswering(
                    sendFailure ?? HTTPError(kind: .transfer, message: "\(peer) closed the reused connection without answering"))
            }
            receivedAny = true
            let progress = n > 0 ? reader.feed(buffer[0..<n]) : reader.finish()
            if let head = progress.head {
                status = head.status
                if streaming, !exchange.openStream(status: head.status) { throw .aborted }
            }
            if !progress.body.isEmpty {
                if streaming {
                    guard exchange.yield(progress.body) else { throw .aborted }
                } else {
                    body += progress.body
                }
            }
            if let error = progress.failure {
                if status == nil, let sendFailure { throw .failed(sendFailure) }
                guard error.kind == .transfer else { throw .failed(error) }
                throw .failed(HTTPError(kind: .transfer, message: "the answer from \(peer) is broken: \(error.message)"))
            }
            if progress.isComplete { break }
        }
        let response = HTTPResponse(status: status ?? 0, body: body, durationMicroseconds: Int64((monotonicNanoseconds() - started) / 1_000))
        // A request that asked the server to close, or whose body the server did not take
        // whole, leaves nothing to reuse.
        return Answer(response: response, keepsConnection: reader.keepsConnection && sendFailure == nil && !asksToClose)
    }

    /// The caller's own `Connection: close`.
    private var asksToClose: Bool {
        HTTPResponseReader.connectionOptions(request.headers.filter { $0.0.lowercased() == "connection" }.map(\.1)).contains("close")
    }
}
