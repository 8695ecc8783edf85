#if canImport(Glibc)
import Glibc
#endif
import CWorkerShims

/// SIGTERM, SIGINT and SIGHUP, delivered as values through a self-pipe: the C handler
/// only writes one byte (async-signal-safe), and a task reads the pipe through the
/// reactor, whichever thread the kernel picked for the signal.
public final class SignalPipe: Sendable {
    private let readFD: Int32
    private let writeFD: Int32

    public init() throws(SystemError) {
        var fds: [Int32] = [0, 0]
        try systemCall("pipe2") { ecw_pipe_nonblocking(&fds) }
        readFD = fds[0]
        writeFD = fds[1]
        let rc = ecw_install_signal_pipe(writeFD)
        if rc < 0 { throw SystemError("sigaction", errno: -rc) }
    }

    /// Bounds a stop whatever state the process is in: it exits with `status`
    /// `afterFirst` seconds after the first signal, `afterSecond` seconds after the
    /// second (whichever is sooner), from the C handler's alarm, so a task that never
    /// ends (or a wedged runtime) cannot hold the process. Only the daemon arms this.
    /// SIGHUP (a reload) is not a stop: it never counts here.
    public func exitIfStopHangs(afterFirst: UInt32, afterSecond: UInt32, status: Int32 = 1) throws(SystemError) {
        let rc = ecw_arm_forced_exit(afterFirst, afterSecond, status)
        if rc < 0 { throw SystemError("sigaction", errno: -rc, detail: "SIGALRM") }
    }

    /// Waits for the next signal and returns its number.
    public func next() async throws -> Int32 {
        while true {
            var byte: UInt8 = 0
            let n = read(readFD, &byte, 1)
            if n == 1 { return Int32(byte) }
            if n < 0, case let code = errno, code != EAGAIN, code != EINTR {
                preconditionErrnoIsNotABug(code, call: "read (signal pipe)")
                throw SystemError("read", errno: code, detail: "signal pipe")
            }
            try await Reactor.shared.waitReadable(readFD)
        }
    }

    public static func name(_ signal: Int32) -> String {
        switch signal {
        case SIGTERM: return "SIGTERM"
        case SIGINT: return "SIGINT"
        case SIGHUP: return "SIGHUP"
        default: return "signal \(signal)"
        }
    }
}
