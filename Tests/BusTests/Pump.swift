import DBus
import Foundation
import Testing

/// Drives buses by hand until `done` (the tests are single-threaded on purpose: a Bus
/// belongs to one owner).
func pump(_ buses: [Bus], until done: () -> Bool) throws {
    for _ in 0..<5_000 {
        for bus in buses { while try bus.process() {} }
        if done() { return }
        usleep(1_000)
    }
    Issue.record("timed out pumping the buses")
}
