/// Code subtasks: the languages a subtask may name and what one run of a program in the
/// sandbox came to. Values only; the container engine that produces them is an adapter.

/// The languages EdgeCoder's coordinator puts in a subtask's `language`.
public enum CodeLanguage: String, Sendable, CaseIterable, Equatable {
    case python
    case javascript

    /// The fenced-block tags a model may use for the language (lower case).
    public var fenceTags: [String] {
        switch self {
        case .python: return ["python", "py", "python3"]
        case .javascript: return ["javascript", "js", "node", "nodejs"]
        }
    }
}

/// One program run in the sandbox: how it ended and what it printed (capped).
public struct ProgramRun: Sendable, Equatable {
    public enum Ending: Sendable, Equatable, CustomStringConvertible {
        /// The program exited with this status.
        case exited(Int32)
        /// Still running at the time limit: the whole container was killed.
        case timedOut(limitMs: Int64)
        /// Killed by a signal it did not ask for (the memory limit's OOM kill is SIGKILL).
        case killed(signal: Int32)
        /// The engine could not run it at all (not installed, image missing, engine error):
        /// the host's fault, never the subtask's.
        case engineFailed(String)

        public var description: String {
            switch self {
            case .exited(let status): return "exited with status \(status)"
            case .timedOut(let limit): return "killed at the \(limit) ms limit"
            case .killed(let signal): return "killed by signal \(signal)"
            case .engineFailed(let why): return "the container engine failed: \(why)"
            }
        }
    }

    public var ending: Ending
    /// What the program wrote to stdout, cut at the output limit.
    public var stdout: String
    /// What it wrote to stderr, cut at the output limit.
    public var stderr: String
    /// Bytes of stdout and stderr beyond the limit, dropped.
    public var droppedBytes: Int
    /// From the engine's start to the container's end.
    public var durationMs: Int64

    public init(ending: Ending, stdout: String = "", stderr: String = "", droppedBytes: Int = 0, durationMs: Int64 = 0) {
        self.ending = ending
        self.stdout = stdout
        self.stderr = stderr
        self.droppedBytes = droppedBytes
        self.durationMs = durationMs
    }

    /// The program ran and exited 0.
    public var succeeded: Bool { ending == .exited(0) }
}
