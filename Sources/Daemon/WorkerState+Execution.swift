import Logging
import WorkerCore

/// Code subtasks: whether the container engine can run them, and how they are answered.
extension WorkerState {
    public func updateSandbox(_ availability: SandboxAvailability) {
        let before = execution.decision
        reports.sandbox = (availability, clock.wallMs())
        let after = execution.decision
        // What is answered how is the news; a new wording of the same reason is not.
        if after.answering != before.answering {
            logger.notice("code subtasks: \(after.why) (sandboxMode \(after.sandboxMode))")
            record(EventDraft(kind: .executionChanged, reason: "\(after.answering.rawValue): \(after.why)"))
        }
        updateServiceStatus()
    }

    /// A new mode-on session looks at the engine afresh.
    public func forgetSandbox() {
        reports.sandbox = (.unknown, nil)
    }

    /// How code subtasks are answered now.
    public var execution: ExecutionStatus {
        ExecutionStatus(
            mode: config.execution.mode, engine: config.execution.engine, image: config.execution.image,
            sandbox: reports.sandbox.availability, checkedAtMs: reports.sandbox.atMs)
    }
}
