#if canImport(Glibc)
import Glibc
#endif
import CCurl
import CCurlShims
import Logging
import Posix
import Synchronization

/// One thin wrapper over libcurl: every transfer runs on one dedicated thread through
/// the multi interface, so no Swift-concurrency thread ever blocks on the network. The
/// only file that touches CURL pointers; each easy handle belongs to that thread.
/// `HTTPClient` sends it `https://` and proxied requests only (`HTTPRoute`).
public final class CurlTransport: HTTPTransport {

    private struct Pending {
        var request: HTTPRequest
        var receiver: HTTPWaiter
    }

    private struct State {
        var nextID: UInt64 = 0
        var submitted: [(UInt64, Pending)] = []
        var cancelled: Set<UInt64> = []
    }

    private let state = Mutex(State())
    /// The multi handle and its thread start with the first request: a daemon in `off`
    /// never loads TLS or spends a thread on HTTP. Only the transfer thread uses the
    /// handle, except curl_multi_wakeup, which libcurl allows from any thread.
    private let engine = Mutex<UnsafeMutableRawPointer?>(nil)

    /// Waits on the multi handle's sockets (curl_multi_poll) up to a timeout in ms; nil
    /// when the wait worked, else why not. A stand-in in tests causes what cannot be caused.
    typealias MultiPoll = @Sendable (_ multi: UnsafeMutableRawPointer, _ timeoutMs: Int32) -> String?

    static let curlMultiPoll: MultiPoll = { multi, timeoutMs in
        var ready: Int32 = 0
        let code = ecw_curl_multi_poll(multi, nil, 0, timeoutMs, &ready)
        return code == CURLM_OK ? nil : String(cString: ecw_curl_multi_strerror(code))
    }

    private let multiPoll: MultiPoll
    /// The longest idle wait; curl_multi_poll returns sooner for its own timers.
    static let idlePollMs: Int32 = 300_000
    private let logger: Logger

    init(multiPoll: @escaping MultiPoll = CurlTransport.curlMultiPoll, logger: Logger = Logger(label: "http")) {
        self.multiPoll = multiPoll
        self.logger = logger
    }

    /// Starts libcurl and the transfer thread once; returns the multi handle.
    private func started() throws(HTTPError) -> UnsafeMutableRawPointer {
        try engine.withLock { (engine) throws(HTTPError) -> UnsafeMutableRawPointer in
            if let multi = engine { return multi }
            var reason = [CChar](repeating: 0, count: 256)
            if ecw_curl_load(&reason, reason.count) != 0 {
                throw HTTPError(kind: .transfer, message: String(cString: reason))
            }
            ecw_curl_global_init(Int(CURL_GLOBAL_DEFAULT))
            guard let multi = ecw_curl_multi_init() else { throw HTTPError(kind: .transfer, message: "curl_multi_init failed") }
            let context = LoopContext(client: self, multi: multi)
            do {
                try startDetachedThread(named: "ecw-curl") { context.client.loop(multi: context.multi) }
            } catch {
                throw HTTPError(kind: .transfer, message: "\(error)")
            }
            engine = multi
            return multi
        }
    }

    /// Interrupts the transfer thread's poll (curl_multi_wakeup is thread-safe).
    private func wake() {
        if let multi = engine.withLock({ $0 }) { ecw_curl_multi_wakeup(multi) }
    }

    /// Handed to the transfer thread once at its start; this side never reads it after.
    private final class LoopContext: @unchecked Sendable {
        let client: CurlTransport
        let multi: UnsafeMutableRawPointer
        init(client: CurlTransport, multi: UnsafeMutableRawPointer) {
            self.client = client
            self.multi = multi
        }
    }

    /// Performs `request`; throws HTTPError, or CancellationError when the task is cancelled.
    public func perform(_ request: HTTPRequest) async throws -> HTTPResponse {
        try await transfer(request) { .whole($0) }
    }

    /// Sends `request` and returns once the first bytes of the answer arrived (or it
    /// ended): the status and the body as it comes. The transfer stays on the one
    /// transfer thread; each chunk is handed over as libcurl delivers it. Ending the
    /// iteration, or cancelling the iterating task, aborts the transfer (the connection
    /// is closed, so the server notices). Throws like `perform` until the status is known.
    public func stream(_ request: HTTPRequest) async throws -> HTTPStreamResponse {
        try await transfer(request) { .stream($0) }
    }

    /// Hands `request` to the transfer thread and waits for what `receiver` waits for;
    /// cancelling the task aborts the transfer.
    private func transfer<Answer>(_ request: HTTPRequest, _ receiver: (CheckedContinuation<Answer, any Error>) -> HTTPWaiter) async throws -> Answer {
        let multi = try started()
        let id = newID()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Answer, any Error>) in
                submit(id, Pending(request: request, receiver: receiver(continuation)), multi: multi)
            }
        } onCancel: {
            cancel(id)
        }
    }

    private func newID() -> UInt64 {
        state.withLock { state -> UInt64 in
            state.nextID += 1
            return state.nextID
        }
    }

    private func submit(_ id: UInt64, _ pending: Pending, multi: UnsafeMutableRawPointer) {
        let cancelledAlready = Task.isCancelled
        state.withLock { state in
            state.submitted.append((id, pending))
            // A cancellation that ran before this submission was already consumed.
            if cancelledAlready { state.cancelled.insert(id) }
        }
        ecw_curl_multi_wakeup(multi)
    }

    private func cancel(_ id: UInt64) {
        state.withLock { _ = $0.cancelled.insert(id) }
        wake()
    }

    /// A transfer in flight, owned by the transfer thread.
    private final class Transfer {
        let id: UInt64
        let easy: UnsafeMutableRawPointer
        /// Nil once a stream's status went out (then `chunks` carries the rest).
        var receiver: HTTPWaiter?
        let maxBytes: Int
        var body: [UInt8] = []
        var received = 0
        var chunks: AsyncThrowingStream<[UInt8], any Error>.Continuation?
        var tooLarge = false
        var headers: UnsafeMutablePointer<curl_slist>?
        /// The retained TransferContext libcurl's write callback receives; released in `finish`.
        var context: UnsafeMutableRawPointer?

        func releaseContext() {
            if let context { Unmanaged<TransferContext>.fromOpaque(context).release() }
            context = nil
        }
        // libcurl writes its error text here; memory of our own, freed in `finish`.
        let errorBuffer: UnsafeMutablePointer<CChar> = {
            let buffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(CURL_ERROR_SIZE) + 1)
            buffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE) + 1)
            return buffer
        }()
        let started = monotonicNanoseconds()

        init(id: UInt64, easy: UnsafeMutableRawPointer, receiver: HTTPWaiter, maxBytes: Int) {
            self.id = id
            self.easy = easy
            self.receiver = receiver
            self.maxBytes = maxBytes
        }

        var isStream: Bool {
            if case .stream? = receiver { return true }
            return chunks != nil
        }

        /// Hands a stream's caller the status and a body stream, once.
        func openStream(onTermination: @escaping @Sendable (UInt64) -> Void) -> AsyncThrowingStream<[UInt8], any Error>.Continuation? {
            if let chunks { return chunks }
            guard case .stream(let continuation)? = receiver else { return nil }
            var status = 0
            _ = ecw_curl_get_long(easy, CURLINFO_RESPONSE_CODE, &status)
            let (body, chunks) = AsyncThrowingStream<[UInt8], any Error>.makeStream()
            let id = self.id
            chunks.onTermination = { _ in onTermination(id) }
            self.chunks = chunks
            receiver = nil
            continuation.resume(returning: HTTPStreamResponse(status: status, body: body))
            return chunks
        }
    }

    /// What the write callback needs: the transfer, and the client to cancel through
    /// when a stream's reader goes away.
    private final class TransferContext {
        let transfer: Transfer
        let client: CurlTransport
        init(transfer: Transfer, client: CurlTransport) {
            self.transfer = transfer
            self.client = client
        }
    }

    private func loop(multi: UnsafeMutableRawPointer) {
        var transfers: [UnsafeMutableRawPointer: Transfer] = [:]
        var backoff = FailureBackoff()
        while true {
            let (submitted, cancelled) = state.withLock { state -> ([(UInt64, Pending)], Set<UInt64>) in
                defer {
                    state.submitted.removeAll()
                    state.cancelled.removeAll()
                }
                return (state.submitted, state.cancelled)
            }
            for (id, pending) in submitted {
                if cancelled.contains(id) {
                    pending.receiver.fail(CancellationError())
                    continue
                }
                switch start(id: id, pending, multi: multi) {
                case .success(let transfer): transfers[transfer.easy] = transfer
                case .failure(let error): pending.receiver.fail(error)
                }
            }
            // A cancellation that arrived before its submission stays pending for it.
            let lateCancels = cancelled.filter { id in !submitted.contains { $0.0 == id } }
            for (easy, transfer) in transfers where lateCancels.contains(transfer.id) {
                finish(transfers.removeValue(forKey: easy)!, result: .failure(CancellationError()), multi: multi)
            }

            var running: Int32 = 0
            ecw_curl_multi_perform(multi, &running)
            var queued: Int32 = 0
            while let message = ecw_curl_multi_info_read(multi, &queued) {
                guard message.pointee.msg == CURLMSG_DONE, let easy = message.pointee.easy_handle,
                    let transfer = transfers.removeValue(forKey: easy)
                else { continue }
                let code = message.pointee.data.result
                finish(transfer, result: outcome(of: transfer, code: code), multi: multi)
            }
            // Idle, the thread sleeps until curl_multi_wakeup (a submission, a cancel) or
            // libcurl's own next timer: a daemon between heartbeats wakes for nothing else.
            if let failure = multiPoll(multi, transfers.isEmpty ? CurlTransport.idlePollMs : 1_000) {
                // A failing wait returns at once: pause instead of spinning, and say so once.
                // Transfers keep their own timeouts, checked by the next curl_multi_perform.
                let (pause, isFirst) = backoff.failed()
                if isFirst {
                    logger.error(
                        "curl_multi_poll failed: \(failure); retrying, with pauses growing to \(FailureBackoff.longestPauseNanoseconds / 1_000_000) ms, until it works"
                    )
                }
                sleepNanoseconds(pause)
            } else if let failures = backoff.succeeded() {
                logger.notice("curl_multi_poll works again after \(failures) failed tries")
            }
        }
    }

    private func start(id: UInt64, _ pending: Pending, multi: UnsafeMutableRawPointer) -> Result<Transfer, any Error> {
        let request = pending.request
        guard let easy = ecw_curl_easy_init() else { return .failure(HTTPError(kind: .transfer, message: "curl_easy_init failed")) }
        let transfer = Transfer(id: id, easy: easy, receiver: pending.receiver, maxBytes: request.maxResponseBytes)
        func check(_ code: CURLcode, _ what: String) throws(HTTPError) {
            if code != CURLE_OK {
                throw HTTPError(
                    kind: code == CURLE_URL_MALFORMAT ? .badURL : .transfer, message: "\(what): \(String(cString: ecw_curl_easy_strerror(code)))")
            }
        }
        do {
            try check(ecw_curl_set_string(easy, CURLOPT_URL, request.url), "URL \(request.url)")
            // Only http and https, also across redirects (which we do not follow anyway).
            try check(ecw_curl_set_string(easy, CURLOPT_PROTOCOLS_STR, "http,https"), "protocols")
            try check(ecw_curl_set_long(easy, CURLOPT_FOLLOWLOCATION, 0), "redirects")
            // TLS is verified, always; there is deliberately no way to turn it off.
            try check(ecw_curl_set_long(easy, CURLOPT_SSL_VERIFYPEER, 1), "TLS peer verification")
            try check(ecw_curl_set_long(easy, CURLOPT_SSL_VERIFYHOST, 2), "TLS host verification")
            try check(ecw_curl_set_long(easy, CURLOPT_NOSIGNAL, 1), "nosignal")
            try check(ecw_curl_set_long(easy, CURLOPT_CONNECTTIMEOUT_MS, Int(request.connectTimeoutMs)), "connect timeout")
            try check(ecw_curl_set_long(easy, CURLOPT_TIMEOUT_MS, Int(request.totalTimeoutMs)), "timeout")
            try check(ecw_curl_set_string(easy, CURLOPT_USERAGENT, HTTPClient.userAgent), "user agent")
            try check(ecw_curl_set_string(easy, CURLOPT_CUSTOMREQUEST, request.method), "method")
            try check(ecw_curl_set_pointer(easy, CURLOPT_ERRORBUFFER, transfer.errorBuffer), "error buffer")
            if let body = request.body {
                try check(ecw_curl_set_offset(easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.count)), "body size")
                try body.withUnsafeBufferPointer { (buffer) throws(HTTPError) in
                    // COPYPOSTFIELDS: libcurl keeps its own copy, so our array may go.
                    try check(
                        ecw_curl_set_pointer(
                            easy, CURLOPT_COPYPOSTFIELDS, UnsafeMutableRawPointer(mutating: buffer.baseAddress ?? UnsafePointer(bitPattern: 1)!)),
                        "body")
                }
            }
            for (name, value) in request.headers {
                transfer.headers = ecw_curl_slist_append(transfer.headers, "\(name): \(value)")
            }
            // An empty Expect: stops libcurl from waiting for "100 Continue" on larger bodies.
            transfer.headers = ecw_curl_slist_append(transfer.headers, "Expect:")
            try check(ecw_curl_set_pointer(easy, CURLOPT_HTTPHEADER, UnsafeMutableRawPointer(transfer.headers)), "headers")
            let context = Unmanaged.passRetained(TransferContext(transfer: transfer, client: self)).toOpaque()
            transfer.context = context
            try check(
                ecw_curl_set_write_function(
                    easy,
                    { data, size, count, raw in
                        let context = Unmanaged<TransferContext>.fromOpaque(raw!).takeUnretainedValue()
                        let transfer = context.transfer
                        let n = size * count
                        if transfer.received + n > transfer.maxBytes {
                            transfer.tooLarge = true
                            return 0  // makes libcurl stop with CURLE_WRITE_ERROR
                        }
                        transfer.received += n
                        guard let data, n > 0 else { return n }
                        let bytes = UnsafeRawBufferPointer(start: data, count: n)
                        if transfer.isStream {
                            // A stream's chunk goes to its reader now, not at the end.
                            let client = context.client
                            transfer.openStream(onTermination: { client.cancel($0) })?.yield(Array(bytes))
                        } else {
                            transfer.body.append(contentsOf: bytes)
                        }
                        return n
                    }, context), "write function")
            let added = ecw_curl_multi_add_handle(multi, easy)
            if added != CURLM_OK {
                throw HTTPError(kind: .transfer, message: "curl_multi_add_handle: \(String(cString: ecw_curl_multi_strerror(added)))")
            }
            return .success(transfer)
        } catch {
            if let headers = transfer.headers { ecw_curl_slist_free_all(headers) }
            ecw_curl_easy_cleanup(easy)
            transfer.errorBuffer.deallocate()
            transfer.releaseContext()
            return .failure(error)
        }
    }

    private func outcome(of transfer: Transfer, code: CURLcode) -> Result<HTTPResponse, any Error> {
        if transfer.tooLarge {
            return .failure(HTTPError(kind: .responseTooLarge, message: "the answer is larger than \(transfer.maxBytes) bytes"))
        }
        guard code == CURLE_OK else {
            let detail = String(cString: transfer.errorBuffer)
            let message = detail.isEmpty ? String(cString: ecw_curl_easy_strerror(code)) : detail
            let kind: HTTPError.Kind
            switch code {
            case CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY: kind = .couldNotResolve
            case CURLE_COULDNT_CONNECT: kind = .couldNotConnect
            case CURLE_OPERATION_TIMEDOUT: kind = .timedOut
            case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CIPHER, CURLE_SSL_CACERT_BADFILE:
                kind = .tls
            case CURLE_URL_MALFORMAT, CURLE_UNSUPPORTED_PROTOCOL: kind = .badURL
            default: kind = .transfer
            }
            return .failure(HTTPError(kind: kind, message: message))
        }
        var status = 0
        _ = ecw_curl_get_long(transfer.easy, CURLINFO_RESPONSE_CODE, &status)
        let micros = Int64((monotonicNanoseconds() - transfer.started) / 1_000)
        return .success(HTTPResponse(status: status, body: transfer.body, durationMicroseconds: micros))
    }

    private func finish(_ transfer: Transfer, result: Result<HTTPResponse, any Error>, multi: UnsafeMutableRawPointer) {
        if case .stream? = transfer.receiver, case .success = result {
            // It ended before any byte of body: an empty stream with the status (read
            // from the handle, so before its cleanup).
            transfer.openStream(onTermination: { _ in })?.finish()
        }
        ecw_curl_multi_remove_handle(multi, transfer.easy)
        ecw_curl_easy_cleanup(transfer.easy)
        if let headers = transfer.headers { ecw_curl_slist_free_all(headers) }
        transfer.errorBuffer.deallocate()
        transfer.releaseContext()
        switch (transfer.receiver, result) {
        case (.whole(let continuation)?, .success(let response)):
            continuation.resume(returning: response)
        case (.stream?, .success):
            break  // opened and finished above
        case (let receiver?, .failure(let error)):
            receiver.fail(error)
        case (nil, .success):
            transfer.chunks?.finish()
        case (nil, .failure(let error)):
            transfer.chunks?.finish(throwing: error)
        }
    }
}
