// swift-tools-version:6.0
// The package holds only what the toolchain and Debian's -dev packages provide:
// no outside Swift package can be fetched on the machines that build it.
import PackageDescription

/// The release link (lld, from the toolchain): the functions of hot-text.order first, in
/// its order; relative relocations packed (DT_RELR, glibc 2.36: 7 KiB where they took
/// 760 KiB, all read at every start); no symbol table for other objects (the toolchain
/// exports every symbol of an executable; nothing loads the worker as a library), which
/// the dynamic loader's lookups read at every start. Together: the binary's share of the
/// idle daemon's memory from 9.2 to 6.3 MiB (docs/development/benchmarks.md).
let releaseLinkFlags = [
    "-use-ld=lld",
    "-Xlinker", "--symbol-ordering-file=\(Context.packageDirectory)/Sources/edgecoder-worker/hot-text.order",
    "-Xlinker", "--no-warn-symbol-ordering",
    "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs",
    "-Xlinker", "--no-export-dynamic",
]

let package = Package(
    name: "edgecoder-worker",
    products: [
        .executable(name: "edgecoder-worker", targets: ["edgecoder-worker"])
    ],
    targets: [
        // C libraries from Debian, each imported by exactly one Swift file.
        // Headers only: libcurl itself is loaded with dlopen on the first request
        // (CCurlShims says why), so no pkg-config link flags here.
        .systemLibrary(name: "CCurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        .systemLibrary(
            name: "CBluetooth", pkgConfig: "bluez",
            providers: [.apt(["libbluetooth-dev"])]),
        .systemLibrary(
            name: "CSystemd", pkgConfig: "libsystemd",
            providers: [.apt(["libsystemd-dev"])]),
        // What Swift cannot call directly (variadic C, GNU-only structs).
        .target(name: "CWorkerShims"),
        .target(name: "CCurlShims", dependencies: ["CCurl"]),

        // The pure core: values in, decisions out, no I/O.
        .target(name: "WorkerCore"),
        // A logger shaped like swift-log, with a journald stderr handler.
        .target(name: "Logging"),
        // Structured-concurrency helpers: race two operations, a boolean tasks wait on.
        .target(name: "Tasks"),
        // System calls wrapped once; the reactor thread; sockets; signals.
        .target(name: "Posix", dependencies: ["CWorkerShims", "Logging", "WorkerCore", "Tasks"]),
        // The state directory: atomic files, corrupt-file quarantine.
        .target(name: "StateStore", dependencies: ["WorkerCore", "Posix"]),
        // Power telemetry read from sysfs/procfs, and the kernel's power-supply uevents.
        .target(name: "Telemetry", dependencies: ["WorkerCore", "Posix"]),
        // HTTP over libcurl, driven by the multi interface on a thread of its own.
        .target(name: "HTTP", dependencies: ["CCurl", "CCurlShims", "Posix", "Logging"]),
        // The local model server (Ollama, llama.cpp's OpenAI-compatible server).
        .target(name: "ModelBackend", dependencies: ["HTTP", "WorkerCore", "Posix"]),
        // sd_notify, the journal and the machine's app-specific id, over libsystemd.
        .target(name: "Systemd", dependencies: ["CSystemd", "Logging"]),
        // D-Bus over libsystemd's sd-bus: the connection, its messages and typed values, and the
        // one round that drives a connection from the reactor.
        .target(name: "DBus", dependencies: ["CSystemd", "Posix", "Logging"]),
        // The host's services on the system bus: logind (suspend, the delay inhibitor),
        // NetworkManager's Metered, power-profiles-daemon's profile.
        .target(name: "HostBus", dependencies: ["DBus", "Posix", "Logging", "WorkerCore"]),
        // The GATT peripheral of mode bluetooth over BlueZ's D-Bus API (sd-bus), and the
        // kernel's adapter view through libbluetooth.
        .target(name: "BlueZ", dependencies: ["DBus", "Posix", "Tasks", "WorkerCore", "Logging", "CBluetooth", "CWorkerShims"]),
        // The daemon's wiring: services, control socket, the worker actor.
        .target(
            name: "Daemon",
            dependencies: [
                "WorkerCore", "Logging", "Posix", "Tasks", "StateStore", "Systemd", "Telemetry", "HTTP", "ModelBackend", "BlueZ", "DBus", "HostBus",
                "Sandbox",
            ]),
        // The HTTP side of `edgecoder-worker proxy`, over any upstream (the BlueZ central).
        .target(name: "Proxy", dependencies: ["WorkerCore", "Logging", "Posix", "Tasks"]),
        // Programs of code subtasks run in a container (podman or docker), and the image they run in.
        .target(name: "Sandbox", dependencies: ["WorkerCore", "Posix", "Logging"]),
        // The operator's command line.
        .target(
            name: "WorkerCLI",
            dependencies: [
                "WorkerCore", "Daemon", "Sandbox", "Posix", "Tasks", "Logging", "HTTP", "BlueZ", "Telemetry", "Proxy", "ModelBackend", "StateStore",
            ]),
        .executableTarget(
            name: "edgecoder-worker", dependencies: ["WorkerCLI"], exclude: ["hot-text.order"],
            linkerSettings: [.unsafeFlags(releaseLinkFlags, .when(configuration: .release))]),
        // Micro-benchmarks for `make bench` (not installed).
        .executableTarget(
            name: "worker-bench", dependencies: ["Telemetry", "WorkerCore", "Posix", "Daemon", "StateStore", "Logging", "ModelBackend"]),

        // What the tests share (clock, transports, private bus, fake trees, the machine
        // driver, the daemon harness). No product depends on it: it is never shipped.
        .target(name: "TestSupport", dependencies: ["WorkerCore", "Posix", "HTTP", "DBus"], path: "Tests/TestSupport"),

        .testTarget(name: "WorkerCoreTests", dependencies: ["WorkerCore", "TestSupport"]),
        .testTarget(name: "StateStoreTests", dependencies: ["StateStore", "WorkerCore", "Posix", "TestSupport"]),
        .testTarget(name: "TelemetryTests", dependencies: ["Telemetry", "WorkerCore", "Posix", "TestSupport"]),
        .testTarget(name: "HTTPTests", dependencies: ["HTTP", "Logging", "Posix", "TestSupport"]),
        .testTarget(name: "ModelBackendTests", dependencies: ["ModelBackend", "WorkerCore", "TestSupport"]),
        .testTarget(
            name: "DaemonTests",
            dependencies: [
                "Daemon", "WorkerCore", "StateStore", "Logging", "BlueZ", "Posix", "Tasks", "ModelBackend", "HTTP", "Systemd", "Sandbox",
                "TestSupport",
            ]),
        // The real `edgecoder-worker` binary run as a process.
        .testTarget(name: "DaemonProcessTests", dependencies: ["WorkerCore", "TestSupport"]),
        .testTarget(name: "ProxyTests", dependencies: ["Proxy", "BlueZ", "Posix", "Logging", "WorkerCore", "TestSupport"]),
        .testTarget(name: "BusTests", dependencies: ["DBus", "BlueZ", "Posix", "WorkerCore", "TestSupport"]),
        .testTarget(name: "LoggingTests", dependencies: ["Logging", "Systemd"]),
        .testTarget(name: "TasksTests", dependencies: ["Tasks", "TestSupport"]),
        .testTarget(name: "PosixTests", dependencies: ["Posix", "Logging", "CWorkerShims", "TestSupport", "Tasks"]),
        .testTarget(name: "SandboxTests", dependencies: ["Sandbox", "WorkerCore", "Posix"]),
        .testTarget(name: "WorkerCLITests", dependencies: ["WorkerCLI", "Logging", "Sandbox", "WorkerCore"]),
    ],
    swiftLanguageModes: [.v6]
)

// The release build lays out together the code the daemon runs when it starts and idles
// (Sources/edgecoder-worker/hot-text.order, written by `make hot-text`): the kernel maps
// text in 64 KiB pieces around each fault, and the idle path's 0.9 MiB spread over the
// whole text kept 6.6 MiB of it resident. Each function needs a section of its own for
// the linker to place it.
for target in package.targets where target.type != .system {
    if ["CWorkerShims", "CCurlShims"].contains(target.name) {
        target.cSettings = (target.cSettings ?? []) + [.unsafeFlags(["-ffunction-sections"], .when(configuration: .release))]
    } else {
        target.swiftSettings = (target.swiftSettings ?? []) + [.unsafeFlags(["-function-sections"], .when(configuration: .release))]
    }
}
