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
