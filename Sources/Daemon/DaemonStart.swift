import StateStore

/// What a daemon started as, fixed for its life: where its files are, its agent id,
/// when it started, and which state files restore had to move aside.
struct DaemonStart: Sendable {
    let paths: DaemonPaths
    let agentID: String
    /// Why the agent id looks copied from another machine, or nil.
    let identityProblem: String?
    let startedAtMs: Int64
    let recovered: [RecoveredStateFile]
}
