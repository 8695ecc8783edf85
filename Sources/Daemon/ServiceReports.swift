import Posix
import WorkerCore

/// What the services last reported, kept for `status` and for the decisions that ask:
/// the host's buses, the network path and its hook, the Bluetooth peripheral, the
/// container engine, and how the last reload went.
struct ServiceReports {
    /// What logind, NetworkManager and power-profiles-daemon said (service §2).
    var host = HostServices()
    var bluetooth = BluetoothStatus()
    var path: PathStatus?
    /// When `path` last became satisfied or unsatisfied (wall clock).
    var pathSinceMs: Int64 = 0
    var lastHook: (name: String, outcome: HookOutcome, timeMs: Int64)?
    /// The last reload's outcome (SIGHUP, `systemctl reload`), for status.
    var configReload: ConfigReloadStatus?
    /// What the last look at the container engine found, and when (mode on looks).
    var sandbox: (availability: SandboxAvailability, atMs: Int64?) = (.unknown, nil)
}
