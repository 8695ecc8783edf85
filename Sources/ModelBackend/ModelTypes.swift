// The values the model backends of SPEC 7 take and give: requests, outputs, errors and
// the readiness shown as `modelState`.

/// One generation: a prompt and its bounds.
public struct ModelRequest: Sendable, Equatable {
    /// The text sent as the prompt (a subtask's `input`, a Bluetooth request's `prompt`).
    public var prompt: String
    /// The most tokens the model may produce (`num_predict`, `max_tokens`); at least 1.
    public var maxTokens: Int
    /// The time the call may take, bounded by `backend.timeoutMs`. Zero or less means
    /// that no time is left: the call fails at once with `timedOut`.
    public var timeoutMs: Int64

    public init(prompt: String, maxTokens: Int = 512, timeoutMs: Int64) {
        self.prompt = prompt
        self.maxTokens = maxTokens
        self.timeoutMs = timeoutMs
    }
}

/// What the model answered.
public struct ModelOutput: Sendable, Equatable {
    /// The generated text, at most `backend.maxOutputBytes` bytes of UTF-8.
    public var text: String
    /// Wall time of the call, from sending the request to the decoded answer.
    public var durationMs: Int64
    /// True when the text was cut at `backend.maxOutputBytes` (on a UTF-8 boundary).
    public var truncated: Bool
    /// Why the model stopped, as the server says it (`stop`, `length`, …), when it says.
    public var finishReason: String?

    public init(text: String, durationMs: Int64, truncated: Bool, finishReason: String? = nil) {
        self.text = text
        self.durationMs = durationMs
        self.truncated = truncated
        self.finishReason = finishReason
    }
}

/// Why a generation gave no output. Callers match on `kind`; `message` is for the
/// operator (what failed, why, what to do) and carries the server's own error text,
/// made printable and bounded, when it gave one.
public struct ModelError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable, Hashable {
        /// Nothing answers at `backend.url` (refused, reset, unresolvable, TLS), or it
        /// closed the connection without an answer.
        case unavailable
        /// No complete answer within the request's time.
        case timedOut
        /// An answer that is not what the API promises: not JSON, wrong types, missing fields.
        case badAnswer
        /// The server does not have `backend.model` (Ollama: not pulled).
        case modelNotFound
        /// The server answered with this non-2xx status (400 context too long, 500, 503 …).
        case rejected(status: Int)
        /// The answer is larger than the response cap (`backend.maxOutputBytes` plus overhead).
        case tooLarge
        /// The request cannot be sent as given (`maxTokens` below 1, an unusable `backend.url`).
        case invalidRequest
        /// The calling task was cancelled; the transfer was stopped.
        case cancelled
    }

    public var kind: Kind
    public var message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { message }

    /// A short, stable code for `error` fields of results and Bluetooth responses
    /// (`model_unavailable`, `model_timed_out`, `model_rejected_500`, …).
    public var code: String {
        switch kind {
        case .unavailable: return "model_unavailable"
        case .timedOut: return "model_timed_out"
        case .badAnswer: return "model_bad_answer"
        case .modelNotFound: return "model_not_found"
        case .rejected(let status): return "model_rejected_\(status)"
        case .tooLarge: return "model_answer_too_large"
        case .invalidRequest: return "model_invalid_request"
        case .cancelled: return "model_cancelled"
        }
    }

    /// The `error` of a failed generation on every wire (a coordinator result, a Bluetooth
    /// response, the task history): `code: detail`, so a client matches on the code before
    /// the first colon and an operator reads the detail.
    public var wireText: String { "\(code): \(message)" }
}

/// The backend's readiness, shown as `modelState` (SPEC 6 status, `status`, `doctor`).
public enum ModelState: String, Sendable, Equatable, CaseIterable {
    /// The server answers and has the configured model.
    case ready
    /// The server answers but is still loading its model (HTTP 503 on the probe).
    case loading
    /// Not probed: the backend is not in use. The probe never gives it; the daemon does.
    case idle
    /// The server does not answer, or answers without the configured model.
    case unavailable
}
