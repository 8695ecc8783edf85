/// How code subtasks are answered (`execution.mode`), and what follows from the mode and
/// the container engine's state: whether programs run, what the coordinator is told
/// (`sandboxMode`), and whether pulls wait.

public enum ExecutionMode: String, Sendable, CaseIterable, Equatable {
    /// Code subtasks run in a container when an engine is usable; otherwise answered as
    /// text, as EdgeCoder's phone worker answers every subtask.
    case auto
    /// Code subtasks only ever run in a container: without a usable engine, no pulls.
    case container
    /// Never run code: every subtask is answered with the model's text.
    case text
}

/// What the last look at the container engine found.
public enum SandboxAvailability: Sendable, Equatable {
    /// Not looked yet (a moment after start or a reload).
    case unknown
    /// A trivial program ran in the image; the text names engine and image.
    case usable(String)
    /// Why not: no engine, no image, the engine refused.
    case unusable(String)
}

/// The execution in force.
public struct ExecutionDecision: Sendable, Equatable {
    public enum Answering: String, Sendable, Equatable {
        /// Code subtasks run in the container.
        case container
        /// Every subtask is answered with the model's text.
        case text
        /// No pulls (`execution.mode` `container` without a usable engine).
        case held
    }

    public var answering: Answering
    /// Why, in a sentence for `status` and `doctor`.
    public var why: String

    /// Registered and sent with every heartbeat: `docker` while programs run in a
    /// container (the coordinator's word for any container sandbox), `none` otherwise.
    /// The coordinator gives a tenant's subtasks only to agents that say `docker`.
    public var sandboxMode: String { answering == .container ? "docker" : "none" }

    public static func decide(mode: ExecutionMode, sandbox: SandboxAvailability) -> ExecutionDecision {
        switch (mode, sandbox) {
        case (.text, _):
            return ExecutionDecision(answering: .text, why: "execution.mode is text: subtasks are answered with the model's text")
        case (_, .usable(let engine)):
            return ExecutionDecision(answering: .container, why: "code subtasks run in a container (\(engine))")
        case (.auto, .unknown):
            return ExecutionDecision(
                answering: .text, why: "the container engine has not been checked yet: answering with the model's text meanwhile")
        case (.auto, .unusable(let why)):
            return ExecutionDecision(answering: .text, why: "no usable container engine (\(why)): subtasks are answered with the model's text")
        case (.container, .unknown):
            return ExecutionDecision(answering: .held, why: "execution.mode is container and the engine has not been checked yet")
        case (.container, .unusable(let why)):
            return ExecutionDecision(answering: .held, why: "execution.mode is container and no container engine is usable: \(why)")
        }
    }
}

/// `status`'s `execution`: the configured mode, what the last look at the engine found,
/// and the decision that follows.
public struct ExecutionStatus: Sendable, Equatable {
    public var mode: ExecutionMode
    public var engine: String
    public var image: String
    public var sandbox: SandboxAvailability
    /// When the engine was last looked at (nil: not yet).
    public var checkedAtMs: Int64?

    public init(
        mode: ExecutionMode = .auto, engine: String = "podman", image: String = "localhost/edgecoder-sandbox:1",
        sandbox: SandboxAvailability = .unknown, checkedAtMs: Int64? = nil
    ) {
        self.mode = mode
        self.engine = engine
        self.image = image
        self.sandbox = sandbox
        self.checkedAtMs = checkedAtMs
    }

    public var decision: ExecutionDecision { .decide(mode: mode, sandbox: sandbox) }

    public var json: JSONValue {
        let decision = self.decision
        var object = JSONObject([
            ("mode", .string(mode.rawValue)), ("answering", .string(decision.answering.rawValue)),
            ("sandboxMode", .string(decision.sandboxMode)), ("why", .string(decision.why)),
            ("engine", .string(engine)), ("image", .string(image)),
        ])
        switch sandbox {
        case .unknown: object["sandbox"] = "unknown"
        case .usable(let what): object["sandbox"] = "usable"; object["sandboxDetail"] = .string(what)
        case .unusable(let why): object["sandbox"] = "unusable"; object["sandboxDetail"] = .string(why)
        }
        if let checkedAtMs { object["checkedAt"] = .string(formatUTC(milliseconds: checkedAtMs)) }
        return .object(object)
    }
}
