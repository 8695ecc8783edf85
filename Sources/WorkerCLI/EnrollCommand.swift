#if canImport(Glibc)
import Glibc
#endif
import HTTP
import Posix
import WorkerCore

/// `enroll`: joins a coordinator in one command (docs/operating/coordinator.md, Quick start): the URL checked, the
/// token stored as the unit's credential, `coordinator.url` written, the daemon reloaded,
/// and with `--on` mode on until registered.
struct EnrollCommand: Command {
    static let name = "enroll"
    static let summary = "join a coordinator: URL, token, config, reload, mode on"
    static let defaultCredential = "/etc/credstore/edgecoder-worker.registration-token"
    static let usage = """
        Usage: edgecoder-worker enroll --coordinator URL [--token-file F] [--token-stdin] [--on] [--timeout S] [--config F] [--credential F] [--runtime-dir D]

        Points this worker at a coordinator: checks the URL (https, unless the config
        sets coordinator.allowInsecureHttp or the host is loopback; one request must
        get an HTTP answer), stores the registration token as the systemd credential
        the unit loads (0600, written atomically; the token is read from a file or
        stdin, never from the command line), writes coordinator.url into the config
        file keeping every other key as it was, and asks the running daemon to reload.
        Under systemd a new token needs the service restarted: enroll restarts it.

          --coordinator URL   the coordinator's address
          --token-file F      read the registration token from F
          --token-stdin       read the registration token from stdin
          --on                then turn mode on and wait until registered
          --timeout S         how long --on waits, in seconds (default 60)
          --config F          the config file (default $EDGECODER_WORKER_CONFIG or \(Defaults.config))
          --credential F      where the token goes (default \(defaultCredential))
          --runtime-dir D     the daemon's runtime directory

        Exit codes: 0 done (and registered, with --on), 1 the coordinator is not
        reachable, a file could not be written or --on timed out, 2 the config file
        is invalid, 3 the coordinator (or the daemon) refused, 64 usage or a URL that
        cannot be used, 69 --on without a running daemon.
        """

    let url: String
    let tokenSource: TokenSource?
    let turnOn: Bool
    let timeoutSeconds: Int
    let configPath: String
    let credentialPath: String
    let runtimeDirectory: String

    enum TokenSource { case file(String), stdin }

    init(_ arguments: inout Arguments) throws(UsageError) {
        guard let url = try arguments.option("--coordinator") else { throw UsageError("--coordinator URL is required") }
        self.url = url
        let file = try arguments.option("--token-file")
        let stdin = arguments.flag("--token-stdin")
        if file != nil && stdin { throw UsageError("--token-file and --token-stdin exclude each other") }
        tokenSource = file.map { .file($0) } ?? (stdin ? .stdin : nil)
        turnOn = arguments.flag("--on")
        timeoutSeconds = try arguments.number("--timeout", in: 1...3_600) ?? 60
        configPath = try arguments.option("--config") ?? environment("EDGECODER_WORKER_CONFIG") ?? Defaults.config
        credentialPath = try arguments.option("--credential") ?? EnrollCommand.defaultCredential
        runtimeDirectory = try WorkerCLI.runtimeDirectory(&arguments)
        if let problem = HTTPURL.validationProblem(url) { throw UsageError("--coordinator \(problem)") }
        if CoordinatorPlaceholder.problem(url) != nil {
            throw UsageError("--coordinator \(url) is the example placeholder: give the real coordinator's address")
        }
    }

    func run() async -> Int32 {
        // The config as it is (a missing file is an empty one), checked before anything is written.
        let original: [UInt8]
        do {
            original = try readFile(configPath, limit: WorkerConfig.maxFileBytes + 1)
        } catch {
            guard error.errno == ENOENT else { return fail(ExitCode.failure, "cannot read \(configPath): \(error.errnoDescription)") }
            original = Array("{}\n".utf8)
        }
        // Cleartext is judged by the file's allowInsecureHttp, before the file could refuse it.
        if let before = try? WorkerConfig.parse(original), !before.coordinator.allowInsecureHttp, let problem = HTTPURL.cleartextProblem(url) {
            return fail(ExitCode.usage, "--coordinator \(problem)")
        }
        let edited: [UInt8]
        do {
            edited = try ConfigEdit.settingCoordinatorURL(original, to: url)
            _ = try WorkerConfig.parse(edited)
        } catch let failure as ConfigEdit.Failure {
            return fail(ExitCode.invalidConfig, "\(configPath): \(failure)")
        } catch let failure as ConfigError {
            return fail(ExitCode.invalidConfig, failure.problems.map { "\(configPath): \($0)" }.joined(separator: "\n"))
        } catch {
            return fail(ExitCode.invalidConfig, "\(configPath): \(error)")
        }
        let token: String?
        switch readToken() {
        case .success(let value): token = value
        case .failure(let failure): return fail(failure.exit, failure.message)
        }

        // Reachable: any HTTP answer counts (the coordinator may answer 404 at its root).
        do {
            let answer = try await HTTPClient.shared.perform(
                HTTPRequest(url: url, connectTimeoutMs: 5_000, totalTimeoutMs: 10_000, maxResponseBytes: 65_536))
            print("\(url) answered (HTTP \(answer.status))")
        } catch {
            return fail(ExitCode.failure, "the coordinator at \(url) is not reachable: \(error); nothing was changed")
        }

        if let token {
            do {
                try AtomicFile.write(credentialPath, Array((token + "\n").utf8), mode: 0o600, directoryMode: 0o700, keepMode: false)
            } catch {
                return fail(ExitCode.failure, "cannot store the token in \(credentialPath): \(error)")
            }
            print("token stored in \(credentialPath)")
        }
        do {
            try AtomicFile.write(configPath, edited, mode: 0o640, directoryMode: 0o750, keepMode: true)
        } catch {
            return fail(ExitCode.failure, "cannot write \(configPath): \(error)")
        }
        print("coordinator.url set to \(url) in \(configPath)")
        return await applyToDaemon(tokenWritten: token != nil)
    }

    struct Failure: Error {
        var exit: Int32
        var message: String
    }

    func fail(_ exit: Int32, _ message: String) -> Int32 {
        Output.fail(exit, message, text: "edgecoder-worker enroll: \(message)")
    }

    /// The token from `--token-file` or stdin, whitespace trimmed; nil when neither was given.
    func readToken() -> Result<String?, Failure> {
        guard let tokenSource else { return .success(nil) }
        let bytes: [UInt8]
        switch tokenSource {
        case .file(let path):
            do { bytes = try readFile(path, limit: 4_097) } catch {
                return .failure(Failure(exit: ExitCode.failure, message: "cannot read the token from \(path): \(error.errnoDescription)"))
            }
        case .stdin:
            do { bytes = try readAll(fd: 0, limit: 4_097, name: "stdin") } catch {
                return .failure(Failure(exit: ExitCode.failure, message: "cannot read the token from stdin: \(error)"))
            }
        }
        guard bytes.count <= 4_096 else { return .failure(Failure(exit: ExitCode.usage, message: "the token is longer than 4096 bytes")) }
        let token = String(decoding: bytes, as: UTF8.self).trimmingWhitespace
        guard !token.isEmpty else { return .failure(Failure(exit: ExitCode.usage, message: "the token is empty")) }
        guard !token.contains(where: { $0.isNewline || $0 == "\0" }) else {
            return .failure(Failure(exit: ExitCode.usage, message: "the token must be one line"))
        }
        return .success(token)
    }

    /// Reload (or, for a new token under systemd, restart) the daemon, then `--on`.
    func applyToDaemon(tokenWritten: Bool) async -> Int32 {
        var client: ControlClient
        do { client = try ControlClient(runtimeDirectory: runtimeDirectory) } catch {
            if turnOn {
                return fail(
                    ExitCode.daemonUnavailable, "the daemon is not running, so mode on cannot be set: start it, then run 'edgecoder-worker mode on'")
            }
            print("the daemon is not running: it reads the config when it starts")
            return ExitCode.ok
        }
        do {
            let status = try client.call(.status)
            let pid = pid_t(status["daemon"]?["pid"]?.intValue ?? 0)
            let mode = status["mode"]?["mode"]?.stringValue ?? "off"
            let urlChanged = status["coordinator"]?["url"]?.stringValue != url
            // The coordinator's address is read when mode on starts: stop it to take the new one.
            if mode == Mode.on.rawValue && urlChanged && status["coordinator"]?["active"] == true {
                _ = try client.call(.setMode(.off))
                print("mode on stopped to take the new coordinator")
            }
            let credentials = daemonCredentialsDirectory(pid: pid)
            if tokenWritten && credentials == nil {
                print("note: the daemon has no CREDENTIALS_DIRECTORY, so it does not read \(credentialPath); under systemd the unit loads it")
            }
            if tokenWritten, let credentials, !credentialPath.hasPrefix(credentials + "/") {
                // systemd hands credentials over when the service starts.
                print("restarting edgecoder-worker.service so that it loads the new token")
                guard spawnAndWait(["systemctl", "restart", "edgecoder-worker.service"]) == 0 else {
                    return fail(ExitCode.failure, "systemctl restart edgecoder-worker.service failed; restart it to load the token")
                }
                client = try await reconnect()
            } else {
                // Answered once the file is applied or refused (the `reload` request).
                let reload = try client.call(.reload)
                if reload["outcome"]?.stringValue == "refused" {
                    return fail(
                        ExitCode.invalidConfig,
                        "the daemon refused the config: \((reload["problems"]?.arrayValue ?? []).compactMap(\.stringValue).joined(separator: "; "))")
                }
                print("the daemon reloaded its config")
            }
            guard turnOn || (mode == Mode.on.rawValue && urlChanged) else { return ExitCode.ok }
            _ = try client.call(.setMode(.on))
            print("mode on; waiting up to \(timeoutSeconds) s for the coordinator to register this worker")
            return try await waitForRegistration(&client)
        } catch {
            switch error {
            case .unavailable(let message): return fail(ExitCode.daemonUnavailable, message)
            case .daemon(let failure):
                return fail(
                    failure.code == .refused ? ExitCode.refused : failure.code == .forbidden ? ExitCode.permission : ExitCode.failure, failure.message
                )
            }
        }
    }

    func reconnect() async throws(ControlClient.Failure) -> ControlClient {
        for _ in 0..<300 {
            try? await Task.sleep(for: .milliseconds(100))
            if var client = try? ControlClient(runtimeDirectory: runtimeDirectory), (try? client.call(.ping)) != nil { return client }
        }
        throw .unavailable("the daemon did not come back within 30 s of its restart")
    }

    /// Polls status until registered; the coordinator's reason when it refuses or time runs out.
    func waitForRegistration(_ client: inout ControlClient) async throws(ControlClient.Failure) -> Int32 {
        let deadline = monotonicNanoseconds() + UInt64(timeoutSeconds) * 1_000_000_000
        var coordinator: JSONValue = .null
        while true {
            let status = try client.call(.status)
            coordinator = status["coordinator"] ?? .null
            if coordinator["registered"] == true {
                print("registered with \(url) as agent \(status["agentId"]?.stringValue ?? "?")")
                return ExitCode.ok
            }
            if let rejection = coordinator["rejection"]?.stringValue {
                return fail(ExitCode.refused, "the coordinator refused this worker: \(rejection)")
            }
            if status["mode"]?["runtime"]?["state"]?.stringValue == "blocked" {
                return fail(ExitCode.refused, "mode on cannot run: \(status["mode"]?["runtime"]?["reason"]?.stringValue ?? "")")
            }
            guard monotonicNanoseconds() < deadline else { break }
            try? await Task.sleep(for: .milliseconds(250))
        }
        let why = coordinator["lastError"]?.stringValue ?? "no answer yet"
        return fail(ExitCode.failure, "not registered after \(timeoutSeconds) s: \(why) (see 'edgecoder-worker status')")
    }

    /// The daemon's CREDENTIALS_DIRECTORY (systemd fills it when the service starts), from
    /// its environment (readable by root and its own user); nil when it has none.
    func daemonCredentialsDirectory(pid: pid_t) -> String? {
        guard pid > 0, let bytes = try? readFile("/proc/\(pid)/environ", limit: 1_048_576) else { return nil }
        let prefix = Array("CREDENTIALS_DIRECTORY=".utf8)
        return bytes.split(separator: 0).first { $0.starts(with: prefix) }.map { String(decoding: $0.dropFirst(prefix.count), as: UTF8.self) }
    }
}

/// Runs a program found on PATH and returns its exit status (nil when it could not start).
func spawnAndWait(_ argv: [String]) -> Int32? {
    var pid: pid_t = 0
    var cArgs: [UnsafeMutablePointer<CChar>?] = argv.map { strdup($0) } + [nil]
    defer { for arg in cArgs { free(arg) } }
    guard posix_spawnp(&pid, argv[0], nil, nil, &cArgs, environ) == 0 else { return nil }
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 { guard errno == EINTR else { return nil } }
    return (status & 0x7f) == 0 ? (status >> 8) & 0xff : nil
}

/// Replaces a file atomically: a temp file in the same directory with the old file's
/// owner and mode (else `mode`), fsync, rename, fsync of the directory. `keepOwner` false
/// leaves the new file to its writer (no fchown, which a unit's syscall filter may deny).
enum AtomicFile {
    static func write(
        _ path: String, _ bytes: [UInt8], mode: mode_t, directoryMode: mode_t, keepMode: Bool,
        keepOwner: Bool = true
    ) throws(SystemError) {
        let slash = path.lastIndex(of: "/")
        let directory = slash.map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
        if mkdir(directory, directoryMode) != 0 && errno != EEXIST { throw SystemError("mkdir", errno: errno, detail: directory) }
        var old = stat()
        let exists = stat(path, &old) == 0
        let mode = exists && keepMode ? old.st_mode & 0o7777 : mode
        // Not `*.prom`: node_exporter's textfile collector never reads a half-written file.
        let temp = path + ".tmp-\(getpid())"
        let fd = try systemCall("open", temp) { open(temp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode) }
        do {
            defer { close(fd) }
            try writeAll(fd: fd, bytes, name: temp)
            // The mode is set explicitly: the umask must not loosen or tighten it.
            try systemCall("fchmod", temp) { fchmod(fd, mode) }
            if exists && keepOwner && geteuid() == 0 { try systemCall("fchown", temp) { fchown(fd, old.st_uid, old.st_gid) } }
            try systemCall("fsync", temp) { fsync(fd) }
            try systemCall("rename", path) { rename(temp, path) }
        } catch {
            unlink(temp)
            throw error
        }
        let dirFD = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dirFD >= 0 { fsync(dirFD); close(dirFD) }
    }
}

extension String {
    var trimmingWhitespace: String {
        String(drop(while: { $0.isWhitespace }).reversed().drop(while: { $0.isWhitespace }).reversed())
    }
}
