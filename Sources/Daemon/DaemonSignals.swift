import Posix
import Tasks
import WorkerCore

/// The daemon's wake-ups: each flag is set by one part and waited on by another without
/// holding the actor, so the actor hands them out as a nonisolated value.
public struct DaemonSignals: Sendable {
    /// Set by the host service, cleared by the part that did it: a heartbeat now, a new
    /// power reading, a new dump of the network path (after a resume).
    public let heartbeatRequested = StateSignal(false)
    public let powerRereadRequested = StateSignal(false)
    public let pathRereadRequested = StateSignal(false)
    /// Set when a pause begins, moves or ends: the pause timer sleeps until the new deadline.
    public let pauseChanged = StateSignal(false)
    /// Set by each fresh read of the host, for `freshenIdleReading` to wait on.
    let freshRead = StateSignal(false)
    /// Set by a reload that changed a key of `ConfigReloadPlan.restartingBluetooth`: the
    /// Bluetooth runtime stops its session and starts one with the new config.
    public let bluetoothRestart = StateSignal(false)
    /// Whether the probe last saw the model ready: a pull loop held by model-unavailable
    /// wakes on it instead of sleeping out its interval with a stale hold in `status`.
    public let modelReady = StateSignal(false)
    /// Whether a working mode (on, bluetooth) is selected; the model probe wakes on changes.
    public let workingModeSelected = StateSignal(false)
    /// Set to ask mode on to look at the container engine again (a run the engine failed).
    public let sandboxCheckRequested = StateSignal(false)
    /// Per mode, whether its runtime should run now; each `ModeRuntime` waits on its own.
    private let runtimes: [Mode: StateSignal] = Dictionary(uniqueKeysWithValues: Mode.allCases.map { ($0, StateSignal(false)) })

    public init() {}

    /// True while `mode`'s runtime should run: the runtime waits for true to start and for
    /// false to stop (gracefully). Every mode has one; `off`'s never becomes true.
    public func runtime(for mode: Mode) -> StateSignal {
        // The table holds every Mode case (built from Mode.allCases).
        runtimes[mode]!
    }
}
