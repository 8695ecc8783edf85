#if canImport(Glibc)
import Glibc
#endif
import Logging
import Posix
import Tasks

/// A long-running part of the daemon (control socket, watchdog, coordinator loop, …).
/// `run` returns when `shutdown` is triggered (graceful: finish what is in hand) and
/// must also end promptly when its task is cancelled (stop now).
public protocol Service: Sendable {
    var name: String { get }
    func run(shutdown: GracefulShutdown) async throws
}

/// A one-shot signal that a service should stop taking work and return.
public final class GracefulShutdown: Sendable {
    private let signal = StateSignal(false)

    public init() {}

    public var isTriggered: Bool { signal.value }

    public func trigger() { signal.set(true) }

    /// Returns once triggered, or when the waiting task is cancelled.
    public func wait() async { await signal.wait(for: true) }

    /// Runs `body` until it returns or shutdown is triggered, in which case `body` is
    /// cancelled: for services whose graceful stop is simply "stop now".
    public func cancelling<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T? {
        switch try await race(body, { await self.wait() }) {
        case .first(let value): return value
        case .second: return nil
        }
    }
}

/// Why the group stopped.
public enum ServiceGroupExit: Sendable, Equatable {
    case signal(Int32)
    case serviceFailed(String)
}

/// Runs services as child tasks and stops them in reverse order of start, gracefully,
/// under one deadline, when a signal arrives or a service ends on its own; a second
/// signal or the deadline cancels what is left (after swift-service-lifecycle).
/// SIGHUP is not a stop: it runs `onReload` and the services go on.
public struct ServiceGroup: Sendable {
    public var services: [any Service]
    public var logger: Logger
    public var gracefulDeadlineNanoseconds: UInt64
    /// Called once when the graceful stop begins (e.g. to tell systemd STOPPING=1).
    public var onShutdownStart: @Sendable () -> Void
    /// Called for each SIGHUP before the stop begins (the config reload); the next
    /// signal is awaited once it returns.
    public var onReload: @Sendable () async -> Void

    public init(
        services: [any Service], logger: Logger, gracefulDeadlineNanoseconds: UInt64, onShutdownStart: @escaping @Sendable () -> Void = {},
        onReload: @escaping @Sendable () async -> Void = {}
    ) {
        self.services = services
        self.logger = logger
        self.gracefulDeadlineNanoseconds = gracefulDeadlineNanoseconds
        self.onShutdownStart = onShutdownStart
        self.onReload = onReload
    }

    private enum Event: Sendable {
        case finished(Int, String?)
        case signal(Int32)
        case deadline
    }

    public func run(signals: SignalPipe) async -> ServiceGroupExit {
        await run(nextSignal: { try await signals.next() })
    }

    /// `run(signals:)` with the signals from any source: tests send them in-process.
    /// `nextSignal` must throw when its task is cancelled.
    public func run(nextSignal: @escaping @Sendable () async throws -> Int32) async -> ServiceGroupExit {
        let tokens = services.map { _ in GracefulShutdown() }
        return await withTaskGroup(of: Event.self) { group in
            for (index, service) in services.enumerated() {
                group.addTask {
                    do {
                        try await service.run(shutdown: tokens[index])
                        return .finished(index, nil)
                    } catch is CancellationError {
                        return .finished(index, nil)
                    } catch {
                        return .finished(index, "\(error)")
                    }
                }
            }
            group.addTask { (try? await nextSignal()).map(Event.signal) ?? .deadline }

            var running = Set(services.indices)
            let exit: ServiceGroupExit
            var first = await group.next()!
            while case .signal(SIGHUP) = first {
                await onReload()
                group.addTask { (try? await nextSignal()).map(Event.signal) ?? .deadline }
                first = await group.next()!
            }
            switch first {
            case .signal(let signo):
                logger.notice("received \(SignalPipe.name(signo)); stopping")
                exit = .signal(signo)
            case .finished(let index, let error):
                running.remove(index)
                let why = error ?? "returned unexpectedly"
                logger.error("service \(services[index].name) stopped: \(why); stopping the daemon")
                exit = .serviceFailed("\(services[index].name): \(why)")
            case .deadline:
                exit = .serviceFailed("signal handling failed")
            }
            onShutdownStart()
            group.addTask { (try? await nextSignal()).map(Event.signal) ?? .deadline }
            group.addTask {
                try? await Task.sleep(nanoseconds: gracefulDeadlineNanoseconds)
                return .deadline
            }

            // Reverse order: later services depend on earlier ones, so they stop first.
            stopping: for index in services.indices.reversed() where running.contains(index) {
                let started = monotonicNanoseconds()
                defer { logger.debug("service \(services[index].name) stopped in \((monotonicNanoseconds() - started) / 1_000_000) ms") }
                tokens[index].trigger()
                while running.contains(index) {
                    switch await group.next()! {
                    case .finished(let done, let error):
                        running.remove(done)
                        if let error { logger.warning("service \(services[done].name) ended with an error while stopping: \(error)") }
                    case .signal(SIGHUP):
                        logger.notice("received SIGHUP while stopping: not reloading")
                        group.addTask { (try? await nextSignal()).map(Event.signal) ?? .deadline }
                    case .signal(let signo):
                        logger.warning("received \(SignalPipe.name(signo)) again; stopping now")
                        break stopping
                    case .deadline:
                        logger.warning(
                            "graceful stop took longer than \(gracefulDeadlineNanoseconds / 1_000_000) ms; cancelling \(running.map { services[$0].name }.sorted().joined(separator: ", "))"
                        )
                        break stopping
                    }
                }
            }
            group.cancelAll()
            return exit
        }
    }
}
