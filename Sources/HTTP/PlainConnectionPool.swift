#if canImport(Glibc)
import Glibc
#endif
import Posix
import Synchronization

/// The idle keep-alive connections of the worker's own HTTP/1.1 client: a few per host and
/// port, each handed to the next request there, so a coordinator's steady requests skip
/// the lookup, the connect and the server's accept.
///
/// No timer and no thread: a connection's age, and whether its server closed it, are
/// checked when a request takes it (an idle daemon never wakes up for the pool). Stale
/// connections of any peer met then are closed; until then one costs a descriptor.
final class PlainConnectionPool: Sendable {
    /// Where a connection goes: the URL's host as written (a name or an address) and port.
    struct Peer: Hashable, Sendable {
        var host: String
        var port: UInt16
    }

    private struct IdleConnection {
        var fd: Int32
        /// CLOCK_MONOTONIC nanoseconds when it was put back.
        var since: UInt64
    }

    /// Below the keep-alive timeouts servers use (uvicorn's 5 s), so that a connection is
    /// seldom taken just as its server closes it; the retry covers the rest.
    static let defaultIdleLimitNanoseconds: UInt64 = 4_000_000_000
    /// The worker talks to one coordinator and one model server, a request or two at a time.
    static let defaultMaxIdlePerPeer = 2

    let maxIdlePerPeer: Int
    let idleLimitNanoseconds: UInt64
    /// The monotonic clock, in nanoseconds; a test's own one moves only when told.
    private let now: @Sendable () -> UInt64
    private let idle = Mutex<[Peer: [IdleConnection]]>([:])

    init(
        maxIdlePerPeer: Int = defaultMaxIdlePerPeer, idleLimitNanoseconds: UInt64 = defaultIdleLimitNanoseconds,
        now: @escaping @Sendable () -> UInt64 = monotonicNanoseconds
    ) {
        self.maxIdlePerPeer = maxIdlePerPeer
        self.idleLimitNanoseconds = idleLimitNanoseconds
        self.now = now
    }

    deinit {
        idle.withLock { idle in
            for connection in idle.values.joined() { close(connection.fd) }
        }
    }

    /// The most recently used idle connection to `peer` that is younger than the idle limit
    /// and still open, nil when there is none. Every connection found too old (to any
    /// peer) or closed by its server is closed here.
    func take(_ peer: Peer) -> Int32? {
        let time = now()
        let stale = idle.withLock { idle -> [Int32] in
            var stale: [Int32] = []
            for (key, connections) in idle {
                let young = connections.filter { time &- $0.since < idleLimitNanoseconds }
                stale += connections.filter { time &- $0.since >= idleLimitNanoseconds }.map(\.fd)
                idle[key] = young.isEmpty ? nil : young
            }
            return stale
        }
        stale.forEach { close($0) }
        while let fd = idle.withLock({ $0[peer]?.popLast()?.fd }) {
            if Self.isStillOpen(fd) { return fd }
            close(fd)
        }
        return nil
    }

    /// Keeps `fd`, whose last answer ended cleanly, for the next request to `peer`; past
    /// `maxIdlePerPeer`, the longest idle one is closed.
    func putBack(_ fd: Int32, for peer: Peer) {
        let time = now()
        let surplus = idle.withLock { idle -> [Int32] in
            var connections = idle[peer, default: []]
            connections.append(IdleConnection(fd: fd, since: time))
            let surplus = connections.prefix(max(0, connections.count - maxIdlePerPeer)).map(\.fd)
            idle[peer] = Array(connections.dropFirst(surplus.count))
            return surplus
        }
        surplus.forEach { close($0) }
    }

    /// How many connections to `peer` are idle here.
    func idleCount(for peer: Peer) -> Int {
        idle.withLock { $0[peer]?.count ?? 0 }
    }

    /// Whether an idle connection is still usable: nothing to read and no hang-up. A server
    /// that closed it (EOF, a reset) or sent bytes unasked has left it unusable.
    static func isStillOpen(_ fd: Int32) -> Bool {
        var pollFD = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        while true {
            let rc = poll(&pollFD, 1, 0)
            if rc >= 0 { return rc == 0 }
            if errno != EINTR { return false }
        }
    }
}
