// libFuzzer target: the config reader (WorkerConfig.parse over the file's bytes).
// Any bytes give a config or a ConfigError with at least one problem, never a crash;
// the problems render as text (what the operator sees).
import WorkerCore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let input = FuzzInput(data, size)
    do {
        let config = try WorkerConfig.parse(input.bytes)
        check(config.backend.maxOutputBytes >= 0, "negative backend.maxOutputBytes accepted")
        check(config.bluetooth.maxRequestBytes > 0, "bluetooth.maxRequestBytes \(config.bluetooth.maxRequestBytes) accepted")
        check(config.coordinator.maxResponseBytes > 0, "coordinator.maxResponseBytes \(config.coordinator.maxResponseBytes) accepted")
    } catch {
        check(!error.problems.isEmpty, "a ConfigError without problems")
        _ = error.description
    }
    return 0
}
