import HTTP
import Synchronization
import WorkerCore

/// An HTTP transport that answers from a script: per path, queued replies first, then a
/// default. It records every request, so tests assert on what was sent and in what order.
public final class ScriptedTransport: HTTPTransport {
    public enum Reply: Sendable {
        case json(Int, String)
        /// No HTTP answer: the error libcurl would have reported.
        case failure(HTTPError.Kind)
        /// No answer until the caller gives up (its task is cancelled).
        case hang
    }

    public struct Call: Sendable {
        public var path: String
        public var headers: [(String, String)]
        public var body: JSONValue?
        public var totalTimeoutMs: Int64

        public func header(_ name: String) -> String? { headers.first { $0.0 == name }?.1 }
    }

    private struct State {
        var calls: [Call] = []
        var queued: [String: [Reply]] = [:]
    }

    private let state = Mutex(State())
    private let defaults: [String: Reply]

    public init(defaults: [String: Reply]) { self.defaults = defaults }

    /// Replies for the next calls to `path`, in order.
    public func script(_ path: String, _ replies: Reply...) {
        state.withLock { $0.queued[path, default: []].append(contentsOf: replies) }
    }

    public var calls: [Call] { state.withLock { $0.calls } }

    public func calls(to path: String) -> [Call] { calls.filter { $0.path == path } }

    public func perform(_ request: HTTP.HTTPRequest) async throws -> HTTPResponse {
        let path = ScriptedTransport.path(of: request.url)
        let body = request.body.flatMap { try? JSON.parse($0) }
        let reply = state.withLock { state -> Reply in
            state.calls.append(Call(path: path, headers: request.headers, body: body, totalTimeoutMs: request.totalTimeoutMs))
            if var queue = state.queued[path], !queue.isEmpty {
                let first = queue.removeFirst()
                state.queued[path] = queue
                return first
            }
            return defaults[path] ?? .json(404, #"{"error":"not_found"}"#)
        }
        switch reply {
        case .json(let status, let text):
            return HTTPResponse(status: status, body: Array(text.utf8))
        case .failure(let kind):
            throw HTTPError(kind: kind, message: "scripted \(kind.rawValue) for \(path)")
        case .hang:
            while true { try await Task.sleep(nanoseconds: 3_600_000_000_000) }
        }
    }

    /// "http://host:port/a/b" → "/a/b".
    public static func path(of url: String) -> String {
        guard let scheme = url.firstRange(of: "://") else { return url }
        let rest = url[scheme.upperBound...]
        guard let slash = rest.firstIndex(of: "/") else { return "/" }
        return String(rest[slash...])
    }
}
