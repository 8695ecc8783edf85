import Logging
import Posix
import WorkerCore

/// Watches the network path through rtnetlink (a dump at start, then events, never
/// polling) and asks the daemon to downgrade or to note a restore (rules 2.3, 2.4).
public struct PathMonitorService: Service {
    public let name = "path-monitor"
    let daemon: WorkerState
    let logger: Logger
    let graceMs: Int64
    let hook: (command: String, timeoutMs: Int64)?

    // RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_IFADDR | RTMGRP_IPV6_ROUTE
    static let groups: UInt32 = 0x1 | 0x10 | 0x40 | 0x100 | 0x400

    public init(daemon: WorkerState, logger: Logger, graceMs: Int64, hook: (command: String, timeoutMs: Int64)?) {
        self.daemon = daemon
        self.logger = logger
        self.graceMs = graceMs
        self.hook = hook
    }

    private enum Input: Sendable {
        case datagram([UInt8])
        case overrun
        case tick
        /// A fresh dump asked for (after a resume: links and routes may have changed).
        case redump
    }

    public func run(shutdown: GracefulShutdown) async throws {
        _ = try await shutdown.cancelling { try await monitor() }
    }

    func monitor() async throws {
        let socket = try NetlinkSocket(protocol: NetlinkSocket.route, groups: PathMonitorService.groups)
        let (inputs, continuation) = AsyncStream<Input>.makeStream()
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask {
                defer { continuation.finish() }
                while true {
                    switch try await socket.receive() {
                    case .datagram(let bytes): continuation.yield(.datagram(bytes))
                    case .overrun: continuation.yield(.overrun)
                    }
                }
            }
            let requests = daemon.signals.pathRereadRequested
            group.addTask {
                while !Task.isCancelled {
                    await requests.wait(for: true)
                    if Task.isCancelled { return }
                    requests.set(false)
                    continuation.yield(.redump)
                }
            }
            var table = PathTable()
            var watch = PathWatch(graceMs: graceMs)
            var sequence: UInt32 = 0
            // Dumps run one after another; events arriving meanwhile apply to the same table.
            var pendingDumps: [UInt16] = []
            var awaitedSequence: UInt32?
            func startDumps() throws {
                table.reset()
                pendingDumps = [18, 22, 26]  // RTM_GETLINK, RTM_GETADDR, RTM_GETROUTE
                try nextDump()
            }
            func nextDump() throws {
                guard !pendingDumps.isEmpty else { awaitedSequence = nil; return }
                sequence &+= 1
                awaitedSequence = sequence
                try socket.send(Rtnetlink.dumpRequest(type: pendingDumps.removeFirst(), sequence: sequence))
            }
            func evaluate() async {
                guard awaitedSequence == nil else { return }  // mid-dump the table is partial
                let now = Int64(monotonicNanoseconds() / 1_000_000)
                let status = table.evaluate()
                await daemon.updatePath(status)
                let hadDeadline = watch.deadlineMs
                for action in watch.observe(status, nowMs: now) { await perform(action, group: &group) }
                if let deadline = watch.deadlineMs, deadline != hadDeadline {
                    let wait = UInt64(max(0, deadline - now)) * 1_000_000
                    group.addTask {
                        try await Task.sleep(nanoseconds: wait)
                        continuation.yield(.tick)
                    }
                }
            }

            try startDumps()
            for await input in inputs {
                switch input {
                case .overrun:
                    logger.warning("rtnetlink overrun: the kernel dropped events; dumping the tables again")
                    try startDumps()
                case .redump:
                    logger.info("reading the network path again")
                    try startDumps()
                case .tick:
                    let now = Int64(monotonicNanoseconds() / 1_000_000)
                    for action in watch.tick(nowMs: now) { await perform(action, group: &group) }
                case .datagram(let bytes):
                    let (messages, error) = Rtnetlink.parse(bytes)
                    if let error { logger.warning("ignoring the rest of a netlink datagram: \(error)") }
                    for message in messages {
                        switch message {
                        case .done(let seq) where seq == awaitedSequence:
                            try nextDump()
                        case .error(let errno, let seq) where seq == awaitedSequence:
                            logger.warning("rtnetlink dump failed with errno \(errno); retrying")
                            try startDumps()
                        case .overrun:
                            try startDumps()
                        default:
                            table.apply(message)
                        }
                    }
                    await evaluate()
                }
            }
        }
    }

    private func perform(_ action: PathAction, group: inout ThrowingDiscardingTaskGroup<any Error>) async {
        switch action {
        case .lost(let reason):
            let result = await daemon.request(.pathLost(reason: reason))
            if result.outcome != .changed { logger.notice("\(reason) (mode \(result.previous.rawValue): no downgrade)") }
        case .restored(let interface):
            let result = await daemon.request(.pathRestored(interface: interface))
            guard result.events.contains(where: { $0.kind == .networkRestored }), let hook else { return }
            let daemon = self.daemon
            let logger = self.logger
            let agentID = daemon.agentID
            group.addTask {
                let (outcome, output) = await HookRunner.run(
                    hook.command,
                    environment: [
                        "EDGECODER_EVENT": "network-restored", "EDGECODER_INTERFACE": interface,
                        "EDGECODER_MODE": "bluetooth", "EDGECODER_AGENT_ID": agentID,
                    ], timeoutMs: hook.timeoutMs)
                // Bounded by the runner: a chatty hook cannot flood the journal.
                for line in output.logLines { logger.info("hooks.networkRestored: \(line)") }
                if outcome.succeeded { logger.info("hooks.networkRestored \(outcome)") } else { logger.warning("hooks.networkRestored \(outcome)") }
                await daemon.recordHook(name: "hooks.networkRestored", outcome: outcome)
            }
        }
    }
}
