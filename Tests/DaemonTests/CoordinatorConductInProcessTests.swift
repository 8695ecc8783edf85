import TestSupport
import Testing
import StateStore
import WorkerCore
@testable import Daemon

/// The session's conduct towards the coordinator's behaviour monitor, in-process with a
/// scripted coordinator and model server and a manual clock. The same behaviours run
/// against the dev coordinator, which enforces the monitor, in IntegrationTests/suites/coordinator.sh.
@Suite struct CoordinatorConductInProcess {
    static func subtask(_ id: String, timeoutMs: Int = 30_000) -> String {
        #"{"subtask":{"id":"\#(id)","taskId":"t-\#(id)","kind":"single_step","input":"say hi","timeoutMs":\#(timeoutMs)}}"#
    }

    @Test func noPullWhileTheModelIsNotReadyThenPullsResumeByThemselves() async throws {
        let bed = try CoordinatorBed()
        bed.transport.script("/pull", .json(200, Self.subtask("s1")))
        await bed.daemon.updateModel(state: "unavailable", detail: "connection refused at http://model.test")
        bed.start(modelReady: false)
        #expect(await bed.clock.waitForSleep(CoordinatorBed.pullMs))
        bed.clock.advance(by: CoordinatorBed.pullMs)
        #expect(await bed.clock.waitForSleep(CoordinatorBed.pullMs))
        #expect(bed.transport.calls(to: "/pull").isEmpty, "a claimed subtask could only fail")
        let status = await bed.daemon.statusJSON()
        #expect(status["coordinator"]?["deferredReason"]?.stringValue?.hasPrefix("held: model-unavailable: unavailable: connection refused") == true)
        #expect(status["power"]?["held"]?["model-unavailable"] == 2)
        #expect(
            status["summary"]?.stringValue?.contains("; new work held: model-unavailable (model backend unavailable)") == true,
            "\(status["summary"] ?? .null)")
        #expect(await bed.daemon.recentEvents(limit: nil).contains { $0.kind == .workHeld && $0.reason.contains("model-unavailable") })

        await bed.daemon.updateModel(state: "ready", detail: "back")
        bed.clock.advance(by: CoordinatorBed.pullMs)
        await eventually("the result once the model is ready") { bed.transport.calls(to: "/result").count == 1 }
        #expect(bed.transport.calls(to: "/result").first?.body?["ok"] == true)
        #expect(await bed.daemon.recentEvents(limit: nil).contains { $0.kind == .workResumed })
        #expect(await bed.status["deferredReason"] == .null)
        await bed.finish()
    }

    @Test func aModelServerThatFailsReleasesEverySubtaskUnansweredAndTheBreakerOpensAtTheThird() async throws {
        let bed = try CoordinatorBed()
        bed.transport.script(
            "/pull", .json(200, Self.subtask("a")), .json(200, Self.subtask("b")), .json(200, Self.subtask("c")),
            .json(200, Self.subtask("d")))
        bed.transport.script(
            "/api/generate", .json(500, #"{"error":"model runner crashed"}"#), .json(502, #"{"error":"bad gateway"}"#),
            .json(503, #"{"error":"busy"}"#))
        bed.start()
        // The breaker's first hold is 30 s; the loop looks again every pull interval.
        #expect(await bed.clock.waitForSleep(CoordinatorBed.pullMs))
        #expect(bed.transport.calls(to: "/pull").count == 3, "\(bed.workCalls)")
        #expect(bed.transport.calls(to: "/result").isEmpty, "the host's failures complete nothing for the swarm")
        #expect(bed.journal.load(nowMs: bed.clock.wallMs()).journal.isEmpty, "released: journal entries dropped")
        let conduct = await bed.daemon.statusJSON()["coordinator"]?["conduct"]
        #expect(conduct?["released"] == 3 && conduct?["consecutiveLocalFailures"] == 3 && conduct?["hold"] == "local-failures")
        let released = await bed.daemon.statusJSON()["counters"]?["subtasksReleased"]
        #expect(released?["host-failure"] == 3 && released?["monitor-would-flag"] == 0, "\(String(describing: released))")
        #expect(await bed.status["deferredReason"]?.stringValue?.hasPrefix("held: local-failures: until ") == true)
        for _ in 0..<5 {
            bed.clock.advance(by: CoordinatorBed.pullMs)
            #expect(await bed.clock.waitForSleep(CoordinatorBed.pullMs))
        }
        #expect(bed.transport.calls(to: "/pull").count == 3, "held 30 s")
        bed.clock.advance(by: CoordinatorBed.pullMs)
        await eventually("a success after the breaker's hold") { bed.transport.calls(to: "/result").count == 1 }
        #expect(bed.transport.calls(to: "/result").first?.body?["subtaskId"] == "d")
        // The coordinator has the result a moment before the daemon records the task done.
        await eventually("the fourth task recorded done") {
            await bed.daemon.tasksJSON(limit: nil)["tasks"]?.arrayValue?.map { $0["state"]?.stringValue ?? "" }
                == ["released", "released", "released", "done"]
        }
        #expect(await bed.daemon.statusJSON()["coordinator"]?["conduct"]?["consecutiveLocalFailures"] == 0, "a success closes it")
        #expect(await bed.daemon.statusJSON()["counters"]?["subtasksDone"] == 1)
        await bed.finish()
    }

    @Test func aSubtaskTheModelRefusesIsAnsweredNamingItUntilAnotherSuchPostWouldTripTheMonitor() async throws {
        let bed = try CoordinatorBed()
        bed.transport.script("/pull", .json(200, Self.subtask("x1")), .json(200, Self.subtask("x2")), .json(200, Self.subtask("x3")))
        let tooLong = #"{"error":"the request exceeds the available context size"}"#
        bed.transport.script("/api/generate", .json(400, tooLong), .json(400, tooLong), .json(400, tooLong))
        bed.start()
        #expect(await bed.clock.waitForSleep(CoordinatorBed.pullMs))
        let posted = bed.transport.calls(to: "/result").compactMap(\.body)
        #expect(posted.count == 2, "the third fast failure would be BHV001's third result under 500 ms")
        #expect(posted.map { $0["ok"] } == [false, false])
        let outputs = posted.compactMap { $0["output"]?.stringValue }
        #expect(outputs.count == 2 && outputs[0] != outputs[1] && outputs[0].contains("x1") && outputs[0].contains("model_rejected_400"))
        let conduct = await bed.daemon.statusJSON()["coordinator"]?["conduct"]
        #expect(conduct?["released"] == 1 && conduct?["monitorFindings"] == [])
        let counters = await bed.daemon.statusJSON()["counters"]
        #expect(counters?["subtasksFailed"] == 2 && counters?["subtasksReleased"]?["monitor-would-flag"] == 1, "\(String(describing: counters))")
        await bed.finish()
    }

    @Test func aSubtasksOwnTimeoutDoesNotCutItsAnswer() async throws {
        let bed = try CoordinatorBed()
        bed.transport.script("/pull", .json(200, Self.subtask("slow", timeoutMs: 1_500)))
        bed.start()
        await eventually("the result") { bed.transport.calls(to: "/result").count == 1 }
        #expect(bed.transport.calls(to: "/api/generate").first?.totalTimeoutMs == WorkerConfig.Backend().timeoutMs)
        await bed.finish()
    }

    /// A claim 10 minutes ago and the last heartbeat 6 minutes ago (a mode off, a suspend):
    /// the session's first heartbeat reveals a gap. Returns the bed's time.
    static func seedGap(_ bed: CoordinatorBed) async -> Int64 {
        let now = bed.clock.wallMs()
        await bed.daemon.updateConduct {
            $0.claimed(atMs: now - 600_000)
            $0.heartbeatAccepted(atMs: now - 360_000)
        }
        return now
    }

    @Test func afterAHeartbeatGapPullsWaitUntilItLeavesTheCoordinatorsHour() async throws {
        let bed = try CoordinatorBed()
        let now = await Self.seedGap(bed)
        bed.start()
        #expect(await bed.clock.waitForSleep(CoordinatorBed.pullMs))
        #expect(bed.transport.calls(to: "/register").count == 1, "the registration came before the first heartbeat showed the gap")
        #expect(bed.transport.calls(to: "/heartbeat").count == 1)
        #expect(bed.transport.calls(to: "/pull").isEmpty)
        let conduct = await bed.daemon.statusJSON()["coordinator"]?["conduct"]
        #expect(conduct?["hold"] == "heartbeat-gap")
        #expect(conduct?["holdUntil"]?.stringValue == formatUTC(milliseconds: now - 360_000 + 3_600_000 + 60_000))
        #expect(conduct?["monitorFindings"] == ["BHV006-heartbeat-gap"])
        #expect(await bed.daemon.statusJSON()["summary"]?.stringValue?.contains("; new work held: heartbeat-gap until ") == true)
        #expect(await bed.status["deferredReason"]?.stringValue?.hasPrefix("held: heartbeat-gap: until ") == true)
        await bed.finish()
    }

    @Test func theGapGuardOffPullsAtOnce() async throws {
        let bed = try CoordinatorBed(configure: { $0.coordinator.gapGuard = false })
        _ = await Self.seedGap(bed)
        bed.start()
        #expect(await bed.clock.waitForSleep(CoordinatorBed.pullMs))
        #expect(bed.transport.calls(to: "/pull").count == 1)
        await bed.finish()
    }

    @Test func registrationsWaitOnceSixWereSentThisHour() async throws {
        let bed = try CoordinatorBed()
        let now = bed.clock.wallMs()
        await bed.daemon.updateConduct { conduct in
            for minute in 1...6 { conduct.registering(atMs: now - Int64(minute) * 60_000) }
        }
        bed.start()
        #expect(await bed.clock.waitForSleep(60_000))
        #expect(bed.transport.calls(to: "/register").isEmpty)
        #expect(await bed.status["lastError"]?.stringValue?.hasPrefix("registration held until ") == true)
        await bed.finish()
    }

    @Test func aSandboxRequiredAnswerIsCountedAsItsOwnHold() async throws {
        let bed = try CoordinatorBed()
        bed.transport.script("/pull", .json(200, #"{"subtask":null,"sandboxRequired":true,"reason":"agent_lacks_sandbox_capability"}"#))
        bed.start()
        #expect(await bed.clock.waitForSleep(CoordinatorBed.pullMs))
        let status = await bed.daemon.statusJSON()
        #expect(status["power"]?["held"]?["sandbox-required"] == 1)
        #expect(status["coordinator"]?["deferredReason"] == "held: sandbox-required: coordinator: agent_lacks_sandbox_capability")
        bed.clock.advance(by: CoordinatorBed.pullMs)
        await eventually("the next pull") { bed.transport.calls(to: "/pull").count == 2 }
        await eventually("the hold to clear") { await bed.status["deferredReason"] == .null }
        await bed.finish()
    }

    /// A bed whose worker registered 10 minutes ago and kept the mesh token it got.
    static func registeredTenMinutesAgo(meshToken: String) async throws -> CoordinatorBed {
        let bed = try CoordinatorBed()
        try WorkerStateFiles(directory: bed.directory).saveMeshToken(meshToken)
        let now = bed.clock.wallMs()
        await bed.daemon.updateConduct { $0.registering(atMs: now - 600_000) }
        return bed
    }

    @Test func aSessionWithinTheHourOfARegistrationGoesOnWithItsMeshTokenWithoutRegistering() async throws {
        let bed = try await Self.registeredTenMinutesAgo(meshToken: "mesh-1")
        bed.transport.script("/pull", .json(200, Self.subtask("r1")))
        bed.start()
        await eventually("the result") { bed.transport.calls(to: "/result").count == 1 }
        #expect(bed.transport.calls(to: "/register").isEmpty, "a restart is no registration")
        #expect(bed.transport.calls.first?.path == "/heartbeat" && bed.transport.calls.first?.header("x-mesh-token") == "mesh-1")
        #expect(await bed.status["registered"] == true)
        await bed.finish()
    }

    @Test func aCoordinatorThatForgotTheAgentIsRegisteredWithAgain() async throws {
        let bed = try await Self.registeredTenMinutesAgo(meshToken: "mesh-old")
        bed.transport.script("/heartbeat", .json(401, #"{"error":"mesh_unauthorized","reason":"agent_not_registered"}"#))
        bed.start()
        #expect(await bed.clock.waitForSleep(CoordinatorBed.pullMs))
        #expect(bed.transport.calls.map(\.path).prefix(3) == ["/heartbeat", "/register", "/heartbeat"])
        #expect(await bed.daemon.statusJSON()["coordinator"]?["conduct"]?["registrationsLastHour"] == 2)
        await bed.finish()
    }

    @Test func aReleasedSubtaskHandedOutAgainIsRunAsNewWork() async throws {
        let bed = try CoordinatorBed()
        try await bed.journal.record(try bed.entry(pulledAgoMs: 45_000))
        bed.transport.script("/pull", .json(200, #"{"subtask":\#(CoordinatorBed.subtask)}"#))
        bed.start()
        await eventually("the result") { bed.transport.calls(to: "/result").count == 1 }
        #expect(bed.transport.calls(to: "/result").first?.body?["ok"] == true)
        #expect(bed.transport.calls(to: "/result").first?.body?["subtaskId"] == "s1")
        await bed.finish()
    }

    @Test func aGenerationThatFindsTheModelServerGoneClosesTheReadinessGateAtOnce() async throws {
        let bed = try CoordinatorBed()
        bed.transport.script("/pull", .json(200, Self.subtask("g1")), .json(200, Self.subtask("g2")))
        bed.transport.script("/api/generate", .failure(.couldNotConnect))
        bed.start()
        #expect(await bed.clock.waitForSleep(CoordinatorBed.pullMs))
        #expect(bed.transport.calls(to: "/pull").count == 1, "no second claim before the probe says the server is back")
        #expect(bed.transport.calls(to: "/result").isEmpty)
        #expect(
            await bed.status["deferredReason"]?.stringValue?.hasPrefix(
                "held: model-unavailable: unavailable: a subtask's generation failed: model_unavailable") == true)
        await bed.daemon.updateModel(state: "ready", detail: "back")
        bed.clock.advance(by: CoordinatorBed.pullMs)
        await eventually("the next claim once ready") { bed.transport.calls(to: "/result").count == 1 }
        await bed.finish()
    }
}
