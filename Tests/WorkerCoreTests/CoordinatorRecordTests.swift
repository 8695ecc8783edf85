import Testing
@testable import WorkerCore

@Suite struct CoordinatorRecordTests {
    static let minute: Int64 = 60_000

    @Test func heartbeatsWithoutClaimsNeverWriteTheConduct() {
        var record = CoordinatorRecord(conduct: CoordinatorConduct())
        for index in 0..<10 {
            #expect(record.heartbeatAccepted(atMs: Int64(index) * 2 * Self.minute, guardGaps: true).persist == false)
        }
    }

    @Test func withClaimsInTheHourHeartbeatsWriteAtMostOnceAMinute() {
        var conduct = CoordinatorConduct()
        conduct.claimed(atMs: 0)
        var record = CoordinatorRecord(conduct: conduct)
        #expect(record.heartbeatAccepted(atMs: Self.minute, guardGaps: true).persist)
        #expect(!record.heartbeatAccepted(atMs: Self.minute + 15_000, guardGaps: true).persist)
        #expect(!record.heartbeatAccepted(atMs: Self.minute + 45_000, guardGaps: true).persist)
        #expect(record.heartbeatAccepted(atMs: 2 * Self.minute, guardGaps: true).persist)
    }

    @Test func aHeartbeatThatBeginsAGapHoldIsWrittenAtOnce() {
        var conduct = CoordinatorConduct()
        conduct.claimed(atMs: 0)
        var record = CoordinatorRecord(conduct: conduct)
        #expect(record.heartbeatAccepted(atMs: 1_000, guardGaps: true) == (nil, false), "written under a minute ago (at start)")
        let after = record.heartbeatAccepted(atMs: 1_000 + 10 * Self.minute, guardGaps: true)
        #expect(after.began?.gapMs == 10 * Self.minute)
        #expect(after.persist, "a gap hold must survive a restart")
        let next = record.heartbeatAccepted(atMs: 1_000 + 10 * Self.minute + 15_000, guardGaps: true)
        #expect(next.began == nil, "the same hold does not begin again")
        #expect(!next.persist)
    }
}

@Suite struct ModelStatusTests {
    static let switched = ActiveModel(model: "big", switchedFrom: "small", switchedAtMs: 1, rolloutID: nil)

    @Test func theActiveModelIsTheSwitchedOneElseTheConfigs() {
        #expect(ModelStatus().active(configured: "small") == "small")
        #expect(ModelStatus(switched: Self.switched).active(configured: "small") == "big")
    }

    @Test func theParameterSizeCountsOnlyForTheModelItWasGivenFor() {
        var status = ModelStatus()
        status.parameterSize = ModelStatus.ParameterSize(model: "small", billions: 7)
        #expect(status.activeParameterSize(configured: "small") == 7)
        status.switched = Self.switched
        #expect(status.activeParameterSize(configured: "small") == nil, "nil after a switch until the new model is probed")
    }

    @Test func readinessSaysWhyNotAndWhetherTheProbeLooked() {
        var status = ModelStatus()
        #expect(status.notReady?.why == "not probed yet")
        #expect(status.notReady?.probed == false)
        status.probe = ModelStatus.Probe(state: "idle", detail: "mode off", atMs: 1)
        #expect(status.notReady?.probed == false)
        status.probe = ModelStatus.Probe(state: "unavailable", detail: "connection refused", atMs: 2)
        #expect(status.notReady?.why == "unavailable: connection refused")
        #expect(status.notReady?.probed == true)
        #expect(!status.isReady)
        status.probe = ModelStatus.Probe(state: "ready", detail: "", atMs: 3)
        #expect(status.notReady == nil)
        #expect(status.isReady)
    }
}
