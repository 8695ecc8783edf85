// Ollama's `/api/pull` answer as pure values (protocol-coordinator §7's model switch): its NDJSON
// progress lines, the stream split into lines, the sum over layers. `ModelPuller` reads a
// pull with them; the daemon forwards `PullProgress` to the coordinator.

import WorkerCore

/// One line of Ollama's streamed `/api/pull` answer (NDJSON).
public enum OllamaPullLine: Sendable, Equatable {
    /// `{"status": "pulling <digest>", "digest", "total", "completed"}` or a status alone
    /// (`pulling manifest`, `verifying sha256 digest`, `writing manifest`, …).
    case progress(status: String, digest: String?, total: Int64?, completed: Int64?)
    /// `{"status": "success"}`: the model is on the server.
    case success
    /// `{"error": "…"}`: Ollama reports a failure inside a 200 stream.
    case failed(String)
    /// Not JSON, or JSON without a status or error.
    case unreadable

    public static func parse(_ line: ArraySlice<UInt8>) -> OllamaPullLine {
        guard let value = try? JSON.parse(line, maxDepth: 4), case .object = value else { return .unreadable }
        if let error = value["error"]?.stringValue { return .failed(printable(error, limit: 400)) }
        guard let status = value["status"]?.stringValue else { return .unreadable }
        if status == "success" { return .success }
        func count(_ key: String) -> Int64? { value[key]?.intValue.flatMap { $0 >= 0 ? $0 : nil } }
        return .progress(
            status: printable(status, limit: 120), digest: value["digest"]?.stringValue.map { printable($0, limit: 100) },
            total: count("total"), completed: count("completed"))
    }
}

/// Splits a byte stream into lines, however the bytes arrive; a line is bounded so a
/// server that never sends a newline cannot grow memory.
public struct LineSplitter: Sendable {
    public static let maxLineBytes = 65_536
    private var pending: [UInt8] = []

    public init() {}

    /// The complete lines in `bytes` (without their newline); an over-long line is cut.
    public mutating func feed(_ bytes: some Sequence<UInt8>) -> [ArraySlice<UInt8>] {
        var lines: [ArraySlice<UInt8>] = []
        for byte in bytes {
            if byte == UInt8(ascii: "\n") {
                lines.append(ArraySlice(pending))
                pending.removeAll(keepingCapacity: true)
            } else if pending.count < LineSplitter.maxLineBytes {
                pending.append(byte)
            }
        }
        return lines
    }

    /// What is left after the stream ended without a final newline.
    public mutating func finish() -> ArraySlice<UInt8>? {
        defer { pending = [] }
        return pending.isEmpty ? nil : ArraySlice(pending)
    }
}

/// The download as a whole: Ollama reports each layer (digest) separately.
public struct PullProgress: Sendable, Equatable {
    private var layers: [String: (total: Int64, completed: Int64)] = [:]
    private var order: [String] = []
    /// The latest status text (`pulling manifest`, `verifying sha256 digest`, …).
    public private(set) var status = "starting"

    public init() {}

    public static func == (a: PullProgress, b: PullProgress) -> Bool {
        a.status == b.status && a.order == b.order && a.order.allSatisfy { a.layers[$0]! == b.layers[$0]! }
    }

    public mutating func apply(_ line: OllamaPullLine) {
        guard case .progress(let status, let digest, let total, let completed) = line else { return }
        self.status = status.hasPrefix("pulling ") && digest != nil ? "downloading" : status
        guard let digest, let total, total > 0 else { return }
        if layers[digest] == nil {
            if order.count >= 256 { return }
            order.append(digest)
        }
        layers[digest] = (total, min(total, completed ?? 0))
    }

    /// Bytes done and to do over every layer seen so far.
    public var bytes: (completed: Int64, total: Int64) {
        order.reduce((0, 0)) { sum, digest in
            let layer = layers[digest]!
            return (sum.0.addingReportingOverflow(layer.completed).partialValue, sum.1.addingReportingOverflow(layer.total).partialValue)
        }
    }

    /// 0–100 with one decimal; nil before any layer has a size.
    public var percent: Double? {
        let (done, total) = bytes
        guard total > 0 else { return nil }
        return (min(100, max(0, Double(done) / Double(total) * 100)) * 10).rounded(.down) / 10
    }

    /// For the status call and `status`: what happens, with the amount when known.
    public func message(model: String) -> String {
        let (done, total) = bytes
        let amount = total > 0 ? " (\(PullProgress.size(done)) of \(PullProgress.size(total)))" : ""
        return "pulling \(model): \(status)\(amount)"
    }

    public static func size(_ bytes: Int64) -> String {
        if bytes >= 1_000_000_000 { return "\((Double(bytes) / 1e8).rounded() / 10) GB" }
        if bytes >= 1_000_000 { return "\((Double(bytes) / 1e5).rounded() / 10) MB" }
        if bytes >= 1_000 { return "\((Double(bytes) / 1e2).rounded() / 10) kB" }
        return "\(bytes) B"
    }
}
