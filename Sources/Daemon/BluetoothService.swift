import BlueZ
import Logging
import ModelBackend
import Posix
import Tasks
import WorkerCore

/// Mode `bluetooth`'s runtime (protocol-bluetooth §1): while it should run, a GATT peripheral session;
/// when it should not (another mode, the charge gate, shutdown), the session takes its
/// application and advertisement back from bluetoothd and closes the bus.
public struct BluetoothService: Service {
    public let name = "bluetooth"
    let daemon: WorkerState
    let backend: ModelBackend
    let config: WorkerConfig
    let logger: Logger

    public init(daemon: WorkerState, backend: ModelBackend, config: WorkerConfig, logger: Logger) {
        self.daemon = daemon
        self.backend = backend
        self.config = config
        self.logger = logger
    }

    public func run(shutdown: GracefulShutdown) async throws {
        await runWhileActive(daemon.signals.runtime(for: Self.mode), restart: daemon.signals.bluetoothRestart, shutdown: shutdown) { stop in
            await session(stop: stop)
            if daemon.signals.bluetoothRestart.value && !shutdown.isTriggered {
                logger.notice("starting the Bluetooth runtime again: a reload changed its security")
            }
        }
    }

    /// One session: a GATT peripheral with the configuration in force now, until `stop`.
    func session(stop: GracefulShutdown) async {
        let host = PeripheralBridge(daemon: daemon, backend: backend, timeoutMs: config.backend.timeoutMs, logger: logger)
        // bluetooth.security and bluetooth.pairingAgent are live (a reload restarts the
        // session); the other keys are the ones read at the daemon's start.
        var bluetooth = config.bluetooth
        let running = await daemon.config.bluetooth
        bluetooth.security = running.security
        bluetooth.pairingAgent = running.pairingAgent
        var settings = PeripheralSettings(config: bluetooth, agentID: daemon.agentID)
        settings.maxTokens = Int(config.bluetooth.maxTokens ?? config.backend.maxTokens)
        settings.pairingAgent = PairingAgentChoice.decide(
            security: bluetooth.security, allowedClients: bluetooth.allowedClients,
            setting: bluetooth.pairingAgent, boot: SystemdBootTarget.read())
        let peripheral = GattPeripheral(settings: settings, host: host, logger: logger)
        logger.notice(
            "starting the Bluetooth runtime (security \(bluetooth.security.rawValue); pairings answered by the \(settings.pairingAgent.answerer.rawValue): \(settings.pairingAgent.reason))"
        )
        // stop() withdraws from bluetoothd while run() still dispatches its answers; only
        // then is run() cancelled. A run() that ends early must not skip stop().
        _ = await race(
            {
                await peripheral.run()
                await suspendUntilCancelled()
            },
            {
                await stop.wait()
                await peripheral.stop()
            })
        logger.notice("Bluetooth runtime stopped: application and advertisement withdrawn")
    }
}

/// The daemon's side of the peripheral: the power policy, the model, the task history.
struct PeripheralBridge: PeripheralHost {
    let daemon: WorkerState
    let backend: ModelBackend
    let timeoutMs: Int64
    var logger = Logger(label: "bluetooth", level: .error)

    func serve(
        _ request: BluetoothRequest, client: String, cancellation: ServeCancellation,
        onPartial: @escaping @Sendable (String) async -> Void
    ) async -> PeripheralOutcome {
        let started = wallClockMilliseconds()
        var record = TaskRecord(id: request.id, source: .bluetooth, origin: client, prompt: request.summaryText, startedAtMs: started)
        var held = await daemon.admitNewWork().map { (reason: $0.rawValue, explanation: $0.explanation) }
        if held == nil { held = await daemon.hostHold(overNetwork: false).map { (reason: $0.rawValue, explanation: $0.explanation) } }
        if let held {
            let error = "held: \(held.reason): \(held.explanation)"
            record.finish(ok: false, output: "", error: error, atMs: wallClockMilliseconds())
            await daemon.upsertTask(record)
            return PeripheralOutcome(ok: false, output: "", error: error, durationMs: 0)
        }
        await daemon.upsertTask(record)
        let modelRequest = Self.modelRequest(request, timeoutMs: timeoutMs)
        let result: Result<ModelOutput, ModelError>
        let backend = self.backend.using(model: await daemon.activeModel)
        do throws(ModelError) {
            if request.stream {
                // Pieces go to the client as they come (those read together, joined); the
                // iteration ends at `.done`.
                var iterator = backend.stream(modelRequest).makeAsyncIterator()
                var output: ModelOutput?
                var first = true
                while output == nil, let event = try await iterator.nextJoinedPiece() {
                    switch event {
                    case .text(let text):
                        if first {
                            first = false
                            logger.debug("request \(request.id): the model's first text after \(wallClockMilliseconds() - started) ms")
                        }
                        await onPartial(text)
                    case .done(let whole): output = whole
                    }
                }
                guard let output else { throw ModelError(.badAnswer, "the stream ended without its end") }
                result = .success(output)
            } else {
                result = .success(try await backend.generate(modelRequest))
            }
        } catch {
            result = .failure(error)
        }
        let ended = wallClockMilliseconds()
        switch result {
        case .success(let output) where cancellation.reason == nil:
            record.finish(ok: true, output: output.text, error: nil, atMs: ended)
            await daemon.upsertTask(record)
            await daemon.updateModel(state: "ready", detail: "answered a request in \(output.durationMs) ms")
            return PeripheralOutcome(ok: true, output: output.text, error: nil, durationMs: output.durationMs, evalCount: output.outputTokens)
        case .success, .failure:
            let error = result.failureValue
            if let reason = cancellation.reason {
                // The client cancelled it (or left): the model was stopped on purpose.
                record.finish(ok: false, output: "", error: reason, atMs: ended, state: .cancelled)
                await daemon.upsertTask(record)
                return PeripheralOutcome(ok: false, output: "", error: reason, durationMs: ended - started)
            }
            let interrupted = Task.isCancelled
            let text = error?.wireText ?? "failed"
            record.finish(ok: false, output: "", error: interrupted ? "interrupted" : text, atMs: ended, state: interrupted ? .interrupted : nil)
            await daemon.upsertTask(record)
            return PeripheralOutcome(ok: false, output: "", error: text, durationMs: ended - started)
        }
    }

    /// A Bluetooth request as the backend takes it: prompt or chat, system, format, options.
    static func modelRequest(_ request: BluetoothRequest, timeoutMs: Int64) -> ModelRequest {
        var model: ModelRequest
        if let turns = request.messages {
            model = ModelRequest(
                messages: turns.map { ModelMessage(role: $0.role, content: $0.content) }, system: request.system,
                maxTokens: request.maxTokens, timeoutMs: timeoutMs)
        } else {
            model = ModelRequest(prompt: request.prompt, maxTokens: request.maxTokens, timeoutMs: timeoutMs)
            model.system = request.system
        }
        model.format = request.format == "json" ? .json : nil
        model.temperature = request.options.temperature
        model.topP = request.options.topP
        model.topK = request.options.topK
        model.seed = request.options.seed.map { Int($0) }
        model.stop = request.options.stop
        model.numCtx = request.options.numCtx
        return model
    }

    func statusValues() async -> (modelState: String, batteryPct: Int?) {
        await daemon.bluetoothStatusValues()
    }

    func report(_ status: BluetoothStatus) async {
        await daemon.updateBluetooth(status)
    }
}

extension Result {
    /// The error of a failure, nil for a success.
    fileprivate var failureValue: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
