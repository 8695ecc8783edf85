#if canImport(Glibc)
import Glibc
#endif
import BlueZ
import Posix
import WorkerCore

// MARK: - bluetooth pair

struct BluetoothCommand: Command {
    static let name = "bluetooth"
    static let summary = "pair a client with this host's adapter: bluetooth pair [--timeout SEC]"
    static let usage = """
        Usage: edgecoder-worker bluetooth pair [--timeout SEC] [--adapter NAME]

        Opens a pairing window: for SEC seconds (or until one device has paired, or
        Ctrl-C) this program is BlueZ's default pairing agent and the adapter is
        pairable. A client that pairs now shows a passkey; confirm here that it shows
        the same digits (y), or type the passkey it shows. Just Works requests (no
        passkey) are asked too, and give an "encrypted" link only. Anything but y is no.
        At the end the agent is unregistered (the desktop's own agent is the default
        again) and the adapter's Pairable setting is restored. Needed once per client
        for bluetooth.security "authenticated", for allowedClients "bonded", and for
        "encrypted" where neither the worker (bluetooth.pairingAgent) nor a desktop
        answers (see docs/operating/bluetooth-pairing.md). Run it as root or a member
        of group bluetooth; the daemon keeps running meanwhile, and its own Just Works
        agent, when it has one, is the default again once the window closes.

          --timeout SEC     how long the window stays open (default 120; 10 to 3600)
          --adapter NAME    the adapter to pair on, like hci0 (default: the first powered one)

        Exit codes: 0 a device paired, 1 none did (timeout, Ctrl-C, refused) or the
        window could not open (the reason is printed), 64 usage.
        """
    let timeoutSec: Int
    let adapter: String?

    init(_ arguments: inout Arguments) throws(UsageError) {
        timeoutSec = try arguments.number("--timeout", in: 10...3_600) ?? 120
        adapter = try arguments.option("--adapter")
        if let adapter, !WorkerConfig.isAdapterName(adapter) {
            throw UsageError("--adapter must be an adapter name like hci0, got '\(printable(adapter))'")
        }
        let words = arguments.positionals()
        switch words.first {
        case "pair"?:
            guard words.count == 1 else { throw UsageError("bluetooth pair takes no arguments besides its options") }
        case nil: throw UsageError("missing subcommand: pair")
        case let other?: throw UsageError("unknown subcommand '\(printable(other))'")
        }
    }

    func run() async -> Int32 {
        let signals: SignalPipe
        do { signals = try SignalPipe() } catch {
            printErr("edgecoder-worker bluetooth pair: cannot set up signal handling: \(error)")
            return ExitCode.failure
        }
        let stop = PairingStop()
        let wake = WakeEvent()
        let adapter = adapter, durationMs = Int64(timeoutSec) * 1_000
        let outcome = await withTaskGroup(of: PairingAgent.Outcome?.self) { group in
            group.addTask {
                // Prompts must reach a pipe at once (a script answers them), so each line
                // is written straight to fd 1, not through stdout's buffer.
                let agent = PairingAgent(adapter: adapter, durationMs: durationMs, stop: stop, wake: wake) { line in
                    writeLine(line)
                }
                return await agent.run()
            }
            group.addTask {
                guard let signal = try? await signals.next() else { return nil }
                stop.set(signal)
                wake.signal()
                return nil
            }
            var result: PairingAgent.Outcome?
            while let next = await group.next() {
                if let next {
                    result = next
                    group.cancelAll()
                }
            }
            return result ?? .failed("the pairing window ended without a result")
        }
        switch outcome {
        case .paired(let address):
            writeLine("Paired with \(address).")
            return ExitCode.ok
        case .closed(let why):
            writeLine("No device paired: \(why).")
            return ExitCode.failure
        case .failed(let why):
            printErr("edgecoder-worker bluetooth pair: \(why)")
            return ExitCode.failure
        }
    }
}

private func writeLine(_ text: String) {
    var bytes = Array((text + "\n").utf8)
    var offset = 0
    while offset < bytes.count {
        let n = bytes.withUnsafeMutableBytes { write(1, $0.baseAddress! + offset, $0.count - offset) }
        if n < 0 && errno == EINTR { continue }
        if n <= 0 { return }
        offset += n
    }
}
