import WorkerCore

// The values the model backends of docs/reference/model-backends.md take and give: requests, outputs, errors and
// the readiness shown as `modelState`.

/// One message of a chat (`role` is `system`, `user` or `assistant`): the same value that
/// a Bluetooth client sends (protocol-bluetooth §2), passed through unchanged.
public typealias ModelMessage = ChatTurn

/// One generation: a prompt or a chat, its bounds and its sampling options.
public struct ModelRequest: Sendable, Equatable {
    /// The text sent as the prompt (a subtask's `input`, a Bluetooth request's `prompt`);
    /// unused when `messages` is set.
    public var prompt: String
    /// A chat: sent to the backend's chat API (`/api/chat`, `/v1/chat/completions`),
    /// never flattened into a prompt.
    public var messages: [ModelMessage]?
    /// The system message; with `prompt` alone it makes the request a chat too on
    /// OpenAI servers (their completions API has no system message).
    public var system: String?
    /// The most tokens the model may produce (`num_predict`, `max_tokens`); at least 1.
    public var maxTokens: Int
    /// The time the call may take, bounded by `backend.timeoutMs`. Zero or less means
    /// that no time is left: the call fails at once with `timedOut`.
    public var timeoutMs: Int64
    public var temperature: Double?
    /// `top_p` on both APIs.
    public var topP: Double?
    /// `top_k` (Ollama's option; llama.cpp and vLLM accept it beside OpenAI's fields).
    public var topK: Int?
    public var seed: Int?
    /// Texts that end the answer when the model writes them (not included).
    public var stop: [String]
    /// Ollama's context size (`num_ctx`); OpenAI servers fix it at their start and have no
    /// field for it, so there it is not sent.
    public var numCtx: Int?
    /// `.json` asks for one JSON value (Ollama `format: "json"`, OpenAI
    /// `response_format: {"type": "json_object"}`).
    public var format: ModelFormat?

    public init(prompt: String, maxTokens: Int = 512, timeoutMs: Int64) {
        self.prompt = prompt
        self.maxTokens = maxTokens
        self.timeoutMs = timeoutMs
        self.stop = []
    }

    public init(messages: [ModelMessage], system: String? = nil, maxTokens: Int = 512, timeoutMs: Int64) {
        self.init(prompt: "", maxTokens: maxTokens, timeoutMs: timeoutMs)
        self.messages = messages
        self.system = system
    }

    /// A chat (messages or a system message) rather than a bare prompt.
    public var isChat: Bool { messages != nil || system != nil }
}

/// The shape an answer must take.
public enum ModelFormat: String, Sendable, Equatable {
    case json
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
    /// Tokens of the prompt and of the answer, when the server counts them.
    public var promptTokens: Int?
    public var outputTokens: Int?
    /// From sending the request to the first piece of text (0 when none came).
    public var firstPieceMs: Int64 = 0

    public init(
        text: String, durationMs: Int64, truncated: Bool, finishReason: String? = nil,
        promptTokens: Int? = nil, outputTokens: Int? = nil
    ) {
        self.text = text
        self.durationMs = durationMs
        self.truncated = truncated
        self.finishReason = finishReason
        self.promptTokens = promptTokens
        self.outputTokens = outputTokens
    }
}

/// What a streamed generation delivers, in order: pieces of text, then `done`.
public enum ModelStreamEvent: Sendable, Equatable {
    /// The next piece of the answer (never empty; cut at `backend.maxOutputBytes`).
    case text(String)
    /// The end: the whole answer with its counts (its `text` is every piece joined).
    case done(ModelOutput)
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
        /// The model spent the answer thinking (Ollama `thinking`, OpenAI
        /// `reasoning_content`) and gave no text: never a success with no output.
        case onlyThought
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
        case .onlyThought: return "model_only_thought"
        }
    }

    /// The `error` of a failed generation on every wire (a coordinator result, a Bluetooth
    /// response, the task history): `code: detail`, so a client matches on the code before
    /// the first colon and an operator reads the detail.
    public var wireText: String { "\(code): \(message)" }
}

/// The backend's readiness, shown as `modelState` (protocol-bluetooth §1 status, `status`, `doctor`).
public enum ModelState: String, Sendable, Equatable, CaseIterable {
    /// A generation would succeed now: the server answers, accepts the key, and has the
    /// model loaded (Ollama: in `/api/ps`).
    case ready
    /// The server answers but is still loading its model (llama.cpp `/health` 503;
    /// Ollama: pulled, not yet in `/api/ps`).
    case loading
    /// Not probed: the backend is not in use. The probe never gives it; the daemon does.
    case idle
    /// The server does not answer, or answers without the configured model.
    case unavailable
    /// The server refuses the configured API key, or wants one and none is configured.
    case unauthorized
}

/// What the readiness probe found: the state, why (for `status` and `doctor`; never the
/// API key), and whether the model must be loaded first (Ollama, not in `/api/ps`).
public struct ModelReadiness: Sendable, Equatable {
    public var state: ModelState
    public var detail: String
    public var needsLoad: Bool
    /// The model's size in billions of parameters when the server said (Ollama's
    /// `details.parameter_size` in `/api/tags`); the heartbeat's `activeModelParamSize`.
    public var parameterSizeBillions: Double?

    public init(_ state: ModelState, _ detail: String, needsLoad: Bool = false, parameterSizeBillions: Double? = nil) {
        self.state = state
        self.detail = detail
        self.needsLoad = needsLoad
        self.parameterSizeBillions = parameterSizeBillions
    }
}
