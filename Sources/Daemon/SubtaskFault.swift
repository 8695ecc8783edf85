import ModelBackend
import WorkerCore

/// Whose fault a subtask's failure is, which decides what the coordinator hears of it. A
/// result, ok or not, completes the subtask for the whole swarm, so a failure of this host
/// (its model server gone, a model error, an answer with no text) is not posted: the
/// subtask goes back to the queue for another agent. Only a failure the subtask itself
/// causes on any agent (the model refusing its input as too long or malformed) is answered.
enum SubtaskFault: Equatable {
    /// No fault: the model's text, posted as `ok: true`.
    case none(String)
    /// A code subtask's program ran: posted as it ended (`ok` its exit status, `output`
    /// its stdout, `error` its stderr). A failing program is the subtask's outcome, not
    /// this host's fault: any agent running it would post the same.
    case program(ok: Bool, output: String, error: String?)
    /// The subtask's own: answered `ok: false` with this reason.
    case subtask(String)
    /// The host's: released, counted towards the circuit breaker. `backendDown` when the
    /// model server is gone or lacks the model: the readiness gate closes at once, before
    /// the probe's next look, so nothing more is claimed meanwhile.
    case host(String, backendDown: Bool)

    /// Statuses with which a model server refuses the request itself (llama.cpp and
    /// Ollama answer 400 for a prompt over the context; 413 and 422 are the same refusal).
    static let inputRefusals: Set<Int> = [400, 413, 422]

    static func classify(_ outcome: Result<ModelOutput, ModelError>) -> SubtaskFault {
        switch outcome {
        case .success(let output):
            if output.text.allSatisfy(\.isWhitespace) {
                return .host("model_empty_answer: the model answered with no text", backendDown: false)
            }
            return .none(output.text)
        case .failure(let error):
            if case .rejected(let status) = error.kind, inputRefusals.contains(status) { return .subtask(error.wireText) }
            return .host(error.wireText, backendDown: error.kind == .unavailable || error.kind == .modelNotFound)
        }
    }

    static func classify(_ outcome: Result<CodeLoop.Outcome, ModelError>) -> SubtaskFault {
        switch outcome {
        case .success(.answered(let ok, let output, let error, _)): return .program(ok: ok, output: output, error: error)
        case .success(.noProgram(let why)): return .host("model_no_program: \(why)", backendDown: false)
        case .success(.engineFailed(let why)): return .host("sandbox_unavailable: \(why)", backendDown: false)
        case .failure(let error): return classify(Result<ModelOutput, ModelError>.failure(error))
        }
    }
}
