import Foundation
import TestSupport
import Testing
import WorkerCore
@testable import Daemon

/// The heartbeat's `activeModelParamSize`, on the wire to a scripted coordinator.
@Suite struct HeartbeatModelSizeTests {
    @Test func theHeartbeatCarriesTheProbedSizeOfTheActiveModelOnly() async throws {
        let bed = try CoordinatorBed()
        for _ in 0..<4 { bed.transport.script("/heartbeat", .json(200, #"{"ok":true}"#)) }
        bed.start()
        await eventually("the first heartbeat") { bed.transport.calls(to: "/heartbeat").count == 1 }
        #expect(bed.transport.calls(to: "/heartbeat").first?.body?["activeModelParamSize"] == nil, "unknown until the probe says")

        await bed.daemon.updateModelParameterSize(1.5, model: "qwen2.5-coder:1.5b")
        bed.clock.advance(by: CoordinatorBed.heartbeatMs)
        await eventually("a heartbeat with the size") { bed.transport.calls(to: "/heartbeat").count == 2 }
        let body = bed.transport.calls(to: "/heartbeat").last?.body
        #expect(body?["activeModel"] == "qwen2.5-coder:1.5b")
        #expect(body?["activeModelParamSize"] == .double(1.5))

        // Another model: its size is not the old one's.
        await bed.daemon.switchModel(to: "big:7b", rolloutID: nil)
        bed.clock.advance(by: CoordinatorBed.heartbeatMs)
        await eventually("a heartbeat with the new model") { bed.transport.calls(to: "/heartbeat").count == 3 }
        #expect(bed.transport.calls(to: "/heartbeat").last?.body?["activeModel"] == "big:7b")
        #expect(bed.transport.calls(to: "/heartbeat").last?.body?["activeModelParamSize"] == nil)
        await bed.finish()
    }
}
