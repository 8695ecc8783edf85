import BlueZ
import Logging
import ModelBackend
import Posix
import WorkerCore

/// Mode `bluetooth`'s runtime (SPEC 6): while it should run, a GATT peripheral session;
/// when it should not (another mode, the charge gate, shutdown), the session takes its
/// application and advertisement back from bluetoothd and closes the bus.
public struct BluetoothService: Service {
    public let name = "bluetooth"
    let daemon: WorkerDaemon
    let backend: ModelBackend
    let config: WorkerConfig
    let logger: Logger

    public init(daemon: WorkerDaemon, backend: ModelBackend, config: WorkerConfig, logger: Logger) {
        self.daemon = daemon
        self.backend = backend
        self.config = config
        self.logger = logger
    }

    public func run(shutdown: GracefulShutdown) async throws {
        let active = daemon.runtimeSignal(for: Self.mode)
        while true {
            _ = await race({ await active.wait(for: true) }, { await shutdown.wait() })
            // Once cancelled, both waits return at once: without the second check a
            // cancelled service started and stopped the runtime in a tight loop, for ever
            // (issue 12 §6: 129 million times after two quick SIGTERMs).
            if shutdown.isTriggered || Task.isCancelled { return }
            let host = PeripheralBridge(daemon: daemon, backend: backend, timeoutMs: config.backend.timeoutMs)
            let peripheral = GattPeripheral(settings: PeripheralSettings(config: config.bluetooth, agentID: daemon.agentID),
                                            host: host, logger: logger)
            logger.notice("starting the Bluetooth runtime")
            // stop() withdraws from bluetoothd while run() still dispatches its answers;
            // only then is run() cancelled. A run() that ends early must not skip stop().
            _ = await race({
                await peripheral.run()
                await suspendUntilCancelled()
            }, {
                _ = await race({ await active.wait(for: false) }, { await shutdown.wait() })
                await peripheral.stop()
            })
            logger.notice("Bluetooth runtime stopped: application and advertisement withdrawn")
        }
    }
}

/// The daemon's side of the peripheral: the power policy, the model, the task history.
struct PeripheralBridge: PeripheralHost {
    let daemon: WorkerDaemon
    let backend: ModelBackend
    let timeoutMs: Int64

    func serve(_ request: BluetoothRequest, client: String) async -> PeripheralOutcome {
        let started = wallClockMilliseconds()
        var record = TaskRecord(id: request.id, source: .bluetooth, origin: client, prompt: request.prompt, startedAtMs: started)
        var held = await daemon.admitNewWork().map { (reason: $0.rawValue, explanation: $0.explanation) }
        if held == nil { held = await daemon.hostHold(overNetwork: false).map { (reason: $0.rawValue, explanation: $0.explanation) } }
        if let held {
            let error = "held: \(held.reason): \(held.explanation)"
            record.finish(ok: false, output: "", error: error, atMs: wallClockMilliseconds())
            await daemon.upsertTask(record)
            return PeripheralOutcome(ok: false, output: "", error: error, durationMs: 0)
        }
        await daemon.upsertTask(record)
        let request = ModelRequest(prompt: request.prompt, maxTokens: request.maxTokens, timeoutMs: timeoutMs)
        let result: Result<ModelOutput, ModelError>
        let backend = self.backend.using(model: await daemon.activeModel)
        do throws(ModelError) { result = .success(try await backend.generate(request)) } catch { result = .failure(error) }
        let ended = wallClockMilliseconds()
        switch result {
        case .success(let output):
            record.finish(ok: true, output: output.text, error: nil, atMs: ended)
            await daemon.upsertTask(record)
            await daemon.updateModel(state: "ready", detail: "answered a request in \(output.durationMs) ms")
            return PeripheralOutcome(ok: true, output: output.text, error: nil, durationMs: output.durationMs)
        case .failure(let error):
            let interrupted = Task.isCancelled
            record.finish(ok: false, output: "", error: interrupted ? "interrupted" : error.wireText, atMs: ended, state: interrupted ? .interrupted : nil)
            await daemon.upsertTask(record)
            return PeripheralOutcome(ok: false, output: "", error: error.wireText, durationMs: ended - started)
        }
    }

    func statusValues() async -> (modelState: String, batteryPct: Int?) {
        await daemon.bluetoothStatusValues()
    }

    func report(_ status: BluetoothStatus) async {
        await daemon.updateBluetooth(status)
    }
}
