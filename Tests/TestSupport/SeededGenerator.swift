import WorkerCore

/// The core's deterministic generator, under the name fuzz-style tests give it: seeded
/// with a constant, a test repeats exactly.
public typealias SeededGenerator = SplitMix64
