import Foundation
import Synchronization
import TestSupport
import Testing
#if canImport(Glibc)
import Glibc
#endif
import WorkerCore

// The servers the backend tests talk to: a REAL llama.cpp server (IntegrationTests/model-server)
// started once per test process, the Ollama fixture forwarding to it, and short-lived
// fixtures with failure switches. Every process started here is stopped by PID when the
// test process exits, and by a watchdog if the test process dies without exiting.

/// The repository root, three levels above this file.
let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
let modelServerDirectory = repositoryRoot + "/IntegrationTests/model-server"

struct BedError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// The processes this test run started, so they never outlive it.
final class ServerRegistry: Sendable {
    static let shared = ServerRegistry()

    struct Entry: Sendable {
        var pid: pid_t
        /// Text that the process's command line contains, checked before a signal so that
        /// a reused PID is never hit.
        var marker: String
        /// A child of ours (reaped here), not a daemon that init adopted.
        var isChild: Bool
        /// A file that names the process (start-llama.sh's pid file), removed with it.
        var pidFile: String?
    }

    private struct State {
        var entries: [Entry] = []
        var watchdog: pid_t?
        var atExitRegistered = false
    }

    private let state = Mutex(State())
    private let listPath = NSTemporaryDirectory() + "/ecw-model-servers-\(getpid()).list"

    func register(pid: pid_t, marker: String, isChild: Bool, pidFile: String? = nil) {
        let first = state.withLock { state -> Bool in
            state.entries.append(Entry(pid: pid, marker: marker, isChild: isChild, pidFile: pidFile))
            defer { state.atExitRegistered = true }
            return !state.atExitRegistered
        }
        writeList()
        if first {
            atexit { ServerRegistry.shared.stopAll() }
            startWatchdog()
        }
    }

    /// Stops one process now (SIGKILL: fixtures need no grace) and forgets it.
    func kill(pid: pid_t) {
        let entry = state.withLock { state -> Entry? in
            guard let index = state.entries.firstIndex(where: { $0.pid == pid }) else { return nil }
            return state.entries.remove(at: index)
        }
        writeList()
        guard let entry else { return }
        if ServerRegistry.isAlive(entry) { Glibc.kill(entry.pid, SIGKILL) }
        if entry.isChild { ServerRegistry.reap(entry.pid, withinMs: 2_000) }
    }

    /// SIGTERM to every process, SIGKILL after 5 s to those still there; then the watchdog.
    func stopAll() {
        let (entries, watchdog) = state.withLock { state in
            defer { state.entries = []; state.watchdog = nil }
            return (state.entries, state.watchdog)
        }
        for entry in entries where ServerRegistry.isAlive(entry) { Glibc.kill(entry.pid, SIGTERM) }
        var waited = 0
        while waited < 500 {
            for entry in entries where entry.isChild { _ = waitpid(entry.pid, nil, WNOHANG) }
            if !entries.contains(where: ServerRegistry.isAlive) { break }
            usleep(10_000)
            waited += 1
        }
        for entry in entries where ServerRegistry.isAlive(entry) { Glibc.kill(entry.pid, SIGKILL) }
        for entry in entries { if let pidFile = entry.pidFile { unlink(pidFile) } }
        if let watchdog {
            Glibc.kill(watchdog, SIGKILL)
            ServerRegistry.reap(watchdog, withinMs: 1_000)
        }
        unlink(listPath)
    }

    static func reap(_ pid: pid_t, withinMs: Int) {
        for _ in 0..<(withinMs / 10) {
            let rc = waitpid(pid, nil, WNOHANG)
            if rc == pid || (rc < 0 && errno == ECHILD) { return }
            usleep(10_000)
        }
    }

    /// Running (not a zombie waiting to be reaped) and still the process we started.
    static func isAlive(_ entry: Entry) -> Bool {
        guard let stat = try? String(contentsOfFile: "/proc/\(entry.pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return false }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        if fields.first == "Z" || fields.first == "X" { return false }
        guard let command = try? Data(contentsOf: URL(fileURLWithPath: "/proc/\(entry.pid)/cmdline")) else { return false }
        return String(decoding: command.map { $0 == 0 ? 0x20 : $0 }, as: UTF8.self).contains(entry.marker)
    }

    private func writeList() {
        let text = state.withLock { state in state.entries.map { "\($0.pid) \($0.marker)\n" }.joined() }
        try? text.write(toFile: listPath, atomically: true, encoding: .utf8)
    }

    /// A shell that outlives a crashed test process: when its parent is gone, it stops
    /// every process in the list (checking each command line first).
    private func startWatchdog() {
        let script = #"""
            trap '' INT TERM HUP
            parent=$1; list=$2
            while kill -0 "$parent" 2>/dev/null; do sleep 0.5; done
            [ -f "$list" ] || exit 0
            for signal in TERM KILL; do
              while read -r pid marker; do
                tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$marker" && kill -"$signal" "$pid" 2>/dev/null
              done <"$list"
              sleep 3
            done
            rm -f "$list"
            """#
        guard let pid = try? spawn(["/bin/sh", "-c", script, "watchdog", String(getpid()), listPath]) else { return }
        state.withLock { $0.watchdog = pid }
    }
}

/// Starts a process with posix_spawn, not Foundation's Process, for three reasons:
/// Process hands its child a socket that every descendant inherits, so a command that
/// leaves a server running (start-llama.sh) never looks finished; a child started from a
/// Swift-concurrency thread inherits that thread's blocked signals, so SIGTERM would never
/// reach it; and the child would inherit every open descriptor of this test process.
/// Here the signal mask and dispositions are reset and descriptors above 2 are closed.
func spawn(_ arguments: [String], stdout: String = "/dev/null", stderr: String = "/dev/null") throws -> pid_t {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 1, stdout, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
    posix_spawn_file_actions_addopen(&actions, 2, stderr, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
    if let closeFrom = addCloseFrom { _ = closeFrom(&actions, 3) }
    var attributes = posix_spawnattr_t()
    posix_spawnattr_init(&attributes)
    defer { posix_spawnattr_destroy(&attributes) }
    var mask = sigset_t()
    sigemptyset(&mask)
    posix_spawnattr_setsigmask(&attributes, &mask)
    var defaults = sigset_t()
    sigfillset(&defaults)
    posix_spawnattr_setsigdefault(&attributes, &defaults)
    posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
    let argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
    defer { argv.forEach { free($0) } }
    var pid: pid_t = 0
    let rc = posix_spawnp(&pid, arguments[0], &actions, &attributes, argv, environ)
    guard rc == 0 else { throw BedError("cannot start \(arguments[0]): \(String(cString: strerror(rc)))") }
    return pid
}

/// glibc's posix_spawn_file_actions_addclosefrom_np (2.34+), which Swift's Glibc module
/// does not declare.
private let addCloseFrom: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>?, Int32) -> Int32)? = {
    guard let symbol = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np") else { return nil }
    return unsafeBitCast(symbol, to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>?, Int32) -> Int32).self)
}()

/// Waits for a child to exit, polling with async sleeps so that no test thread blocks.
/// Its exit status, or nil when it is still running at the deadline.
func waitForExit(_ pid: pid_t, timeoutSeconds: Double) async throws -> Int32? {
    let deadline = ContinuousClock.now + .milliseconds(Int(timeoutSeconds * 1_000))
    while ContinuousClock.now < deadline {
        var status: Int32 = 0
        let rc = waitpid(pid, &status, WNOHANG)
        if rc == pid { return status & 0x7F == 0 ? (status >> 8) & 0xFF : 128 + (status & 0x7F) }
        // Someone else reaped it (another library's SIGCHLD handling): gone, status unknown.
        if rc < 0 && errno == ECHILD { return -1 }
        try await Task.sleep(for: .milliseconds(20))
    }
    return nil
}

/// A free TCP port on 127.0.0.1 (bound to port 0, read back, released).
func freePort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw BedError("socket: errno \(errno)") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) { pointer in
        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw -> Bool in
            bind(fd, raw, length) == 0 && getsockname(fd, raw, &length) == 0
        }
    }
    guard bound else { throw BedError("bind 127.0.0.1:0: errno \(errno)") }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// Runs a command to its end, its output in temporary files.
func runCommand(_ arguments: [String], timeoutSeconds: Double) async throws -> CommandResult {
    let base = NSTemporaryDirectory() + "/ecw-mb-\(getpid())-\(UUID().uuidString.prefix(8))"
    defer { unlink(base + ".out"); unlink(base + ".err") }
    let pid = try spawn(arguments, stdout: base + ".out", stderr: base + ".err")
    guard let status = try await waitForExit(pid, timeoutSeconds: timeoutSeconds) else {
        kill(pid, SIGKILL)
        _ = try? await waitForExit(pid, timeoutSeconds: 2)
        throw BedError("\(arguments.joined(separator: " ")) did not finish within \(timeoutSeconds) s")
    }
    let out = (try? String(contentsOfFile: base + ".out", encoding: .utf8)) ?? ""
    let err = (try? String(contentsOfFile: base + ".err", encoding: .utf8)) ?? ""
    return CommandResult(status: status, stdout: out, stderr: err)
}

/// One `ollama_fixture.py`, started with the given switches; stop it with `stop()`.
struct OllamaFixture: Sendable {
    let url: String
    let pid: pid_t

    static func start(_ switches: [String]) async throws -> OllamaFixture {
        let out = NSTemporaryDirectory() + "/ecw-ollama-fixture-\(getpid())-\(UUID().uuidString.prefix(8)).out"
        defer { unlink(out) }
        let pid = try spawn(["python3", modelServerDirectory + "/ollama_fixture.py", "--port", "0", "--quiet"] + switches, stdout: out)
        ServerRegistry.shared.register(pid: pid, marker: "ollama_fixture.py", isChild: true)
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline {
            let text = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
            if let range = text.range(of: "listening on ") {
                let url = text[range.upperBound...].prefix { !$0.isWhitespace }
                return OllamaFixture(url: String(url), pid: pid)
            }
            if waitpid(pid, nil, WNOHANG) == pid { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        ServerRegistry.shared.kill(pid: pid)
        throw BedError("ollama_fixture.py \(switches.joined(separator: " ")) did not start listening")
    }

    func stop() { ServerRegistry.shared.kill(pid: pid) }
}

/// `loading_front.py` in front of a llama.cpp server: llama-server's loading phase.
func startLoadingFront(upstream: String, loadingMs: Int) async throws -> OllamaFixture {
    let out = NSTemporaryDirectory() + "/ecw-loading-front-\(getpid())-\(UUID().uuidString.prefix(8)).out"
    defer { unlink(out) }
    let pid = try spawn(
        [
            "python3", modelServerDirectory + "/loading_front.py", "--port", "0", "--upstream", upstream,
            "--loading-ms", String(loadingMs),
        ], stdout: out)
    ServerRegistry.shared.register(pid: pid, marker: "loading_front.py", isChild: true)
    let deadline = ContinuousClock.now + .seconds(20)
    while ContinuousClock.now < deadline {
        let text = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
        if let range = text.range(of: "listening on ") {
            return OllamaFixture(url: String(text[range.upperBound...].prefix { !$0.isWhitespace }), pid: pid)
        }
        if waitpid(pid, nil, WNOHANG) == pid { break }
        try await Task.sleep(for: .milliseconds(20))
    }
    ServerRegistry.shared.kill(pid: pid)
    throw BedError("loading_front.py did not start listening")
}

/// The servers shared by every test in this process, each started once, on first use,
/// however many tests ask for it at the same time.
actor ModelServerBed {
    static let shared = ModelServerBed()

    enum Outcome: Sendable {
        case running(String)
        /// prepare.sh could not build the llama.cpp environment: the only reason to skip.
        case cannotBuild(String)
        case failed(String)
    }

    private var llamaStart: Task<Outcome, Never>?
    private var keyedStart: Task<Outcome, Never>?

    /// The key of the second llama.cpp server, which requires it (`--api_key`).
    static let apiKey = "ecw-test-key-7f3a"

    /// A second llama.cpp server that requires `apiKey` on every API call.
    func llamaWithKey() async throws -> String {
        if keyedStart == nil { keyedStart = Task { await ModelServerBed.startLlama(apiKey: ModelServerBed.apiKey) } }
        return try await ModelServerBed.use(keyedStart!)
    }
    private var upstreamStart: Task<Outcome, Never>?
    private var echoStart: Task<Outcome, Never>?

    /// The llama.cpp server's URL. The test is skipped, with prepare.sh's own words, only
    /// when prepare.sh cannot build its environment; any later failure is a failure.
    func llama() async throws -> String {
        if llamaStart == nil { llamaStart = Task { await ModelServerBed.startLlama() } }
        return try await ModelServerBed.use(llamaStart!)
    }

    /// The Ollama fixture forwarding to the llama.cpp server.
    func upstream() async throws -> String {
        if upstreamStart == nil {
            let llama = llamaStart ?? Task { await ModelServerBed.startLlama() }
            llamaStart = llama
            upstreamStart = Task {
                guard case .running(let url) = await llama.value else { return await llama.value }
                return await ModelServerBed.startFixture(["--upstream", url + "/v1/completions"])
            }
        }
        return try await ModelServerBed.use(upstreamStart!)
    }

    /// The Ollama fixture without upstream: it answers the prompt's words, cycled, at most
    /// four times the prompt's word count and at most num_predict words.
    func echo() async throws -> String {
        if echoStart == nil { echoStart = Task { await ModelServerBed.startFixture([]) } }
        return try await ModelServerBed.use(echoStart!)
    }

    private static func use(_ start: Task<Outcome, Never>) async throws -> String {
        switch await start.value {
        case .running(let url): return url
        case .cannotBuild(let why): try Test.cancel(Comment(rawValue: why))
        case .failed(let why): throw BedError(why)
        }
    }

    private static func startLlama(apiKey: String? = nil) async -> Outcome {
        do {
            // A cold build compiles llama.cpp: minutes on two cores.
            let prepared = try await runCommand([modelServerDirectory + "/prepare.sh"], timeoutSeconds: 3_600)
            if prepared.status != 0 {
                return .cannotBuild(
                    "IntegrationTests/model-server/prepare.sh could not build the llama.cpp environment (status \(prepared.status)), so the real-server tests are skipped: \(prepared.stderr.suffix(1_500))"
                )
            }
            let port = try freePort()
            let started: CommandResult
            do {
                let command = [modelServerDirectory + "/start-llama.sh", String(port)]
                started = try await runCommand(
                    apiKey.map { ["/usr/bin/env", "EDGECODER_LLAMA_API_KEY=\($0)"] + command } ?? command, timeoutSeconds: 120)
            } catch {
                // The script was killed mid-start: its server (pid file by port) goes too.
                _ = try? await runCommand([modelServerDirectory + "/stop-llama.sh", String(port)], timeoutSeconds: 20)
                throw error
            }
            guard started.status == 0, let pid = pid_t(started.stdout.split(separator: "\n").last ?? "") else {
                return .failed("start-llama.sh \(port) failed (status \(started.status)): \(started.stderr.suffix(2_000))")
            }
            let cache =
                ProcessInfo.processInfo.environment["EDGECODER_TEST_CACHE"] ?? (ProcessInfo.processInfo.environment["HOME"] ?? "/root")
                + "/.cache/edgecoder-worker"
            ServerRegistry.shared.register(pid: pid, marker: "llama_cpp.server", isChild: false, pidFile: cache + "/run/llama-\(port).pid")
            return .running("http://127.0.0.1:\(port)")
        } catch {
            return .failed("starting the llama.cpp server: \(error)")
        }
    }

    private static func startFixture(_ switches: [String]) async -> Outcome {
        do {
            return .running(try await OllamaFixture.start(switches).url)
        } catch {
            return .failed("\(error)")
        }
    }
}

/// A backend configuration for the tests.
func backendConfig(
    _ kind: WorkerConfig.BackendKind, url: String, model: String = "tiny",
    endpoint: WorkerConfig.OpenAIEndpoint = .completions,
    timeoutMs: Int64 = 60_000, maxOutputBytes: Int64 = 262_144,
    apiKey: String? = nil, think: Bool = false
) -> WorkerConfig.Backend {
    var config = WorkerConfig.Backend()
    config.apiKey = apiKey
    config.think = think
    config.kind = kind
    config.url = url
    config.model = model
    config.openaiEndpoint = endpoint
    config.timeoutMs = timeoutMs
    config.maxOutputBytes = maxOutputBytes
    return config
}

/// Milliseconds since `start` on the monotonic clock.
func elapsedMs(since start: ContinuousClock.Instant) -> Int64 {
    let elapsed = ContinuousClock.now - start
    return elapsed.components.seconds * 1_000 + elapsed.components.attoseconds / 1_000_000_000_000_000
}
