import Foundation
import Logging
import StateStore
import TestSupport
import Testing
import WorkerCore
@testable import Daemon

/// The coordinator's model switch in-process (protocol-coordinator §7): a scripted coordinator and Ollama
/// server, the manual clock. IntegrationTests/suites/coordinator.sh runs it against the dev
/// coordinator and the Ollama fixture.
@Suite struct ModelSwitchInProcess {
    static let request =
        #"{"ok":true,"orchestration":{"rolloutId":"r1","provider":"ollama-local","model":"big:7b","autoInstall":true,"pending":true}}"#
    static let pull =
        [
            #"{"status":"pulling manifest"}"#,
            #"{"status":"pulling aa","digest":"sha256:aa","total":100,"completed":50}"#,
            #"{"status":"pulling aa","digest":"sha256:aa","total":100,"completed":100}"#,
            #"{"status":"success"}"#,
        ].joined(separator: "\n") + "\n"

    static func reading(battery: Int, mains: Bool) -> PowerReading {
        PowerReading(
            telemetry: PowerTelemetry(onExternalPower: mains, batteryPct: battery, hasSystemBattery: true, updatedAtMs: 1),
            supplies: [], sensors: [], platformProfile: nil, chassisType: nil, cpuSampled: false, cpuHadPreviousSample: false, memoryRead: false)
    }

    func paths(_ bed: CoordinatorBed) async -> (status: String, ack: String) {
        let agent = await bed.daemon.agentID
        return ("/orchestration/agents/\(agent)/status", "/orchestration/agents/\(agent)/ack")
    }

    @Test func byDefaultASwitchIsRefusedWithTheReasonAndNothingIsPulled() async throws {
        let bed = try CoordinatorBed()
        let (status, ack) = await paths(bed)
        bed.transport.script("/heartbeat", .json(200, Self.request))
        bed.transport.script(status, .json(200, #"{"ok":true}"#))
        bed.transport.script(ack, .json(200, #"{"ok":false,"pending":false}"#))
        bed.start()
        await eventually("the ack") { bed.transport.calls(to: ack).count == 1 }
        let body = bed.transport.calls(to: ack).first?.body
        #expect(body?["ok"] == false)
        #expect(body?["error"]?.stringValue?.contains("allowRemoteModelSwitch") == true)
        #expect(bed.transport.calls(to: ack).first?.header("x-mesh-token") == "mesh-1")
        #expect(bed.transport.calls(to: "/api/pull").isEmpty)
        #expect(await bed.daemon.activeModel == "qwen2.5-coder:1.5b")
        #expect(await bed.daemon.model.switchStatus?.phase == .refused)
        await bed.finish()
    }

    @Test func thePowerPolicyHoldsAPullThenItRunsSwitchesPersistsAndAcks() async throws {
        let bed = try CoordinatorBed(configure: {
            $0.backend.allowRemoteModelSwitch = true; $0.policy.allowRemoteModelSwitch = true
        })
        let (status, ack) = await paths(bed)
        bed.transport.script("/heartbeat", .json(200, Self.request))
        for _ in 0..<8 { bed.transport.script(status, .json(200, #"{"ok":true}"#)) }
        bed.transport.script(ack, .json(200, #"{"ok":true,"pending":false}"#))
        bed.transport.script("/api/pull", .json(200, Self.pull))
        await bed.daemon.updateReading(Self.reading(battery: 10, mains: false), monotonicMs: 0)
        bed.start()
        // Status shows the phase before the coordinator is told: wait for both.
        await eventually("the switch to wait for the policy") {
            await bed.daemon.model.switchStatus?.phase == .held && bed.transport.calls(to: status).count == 2
        }
        #expect(bed.transport.calls(to: status).compactMap { $0.body?["phase"]?.stringValue } == ["starting", "held"])
        #expect(await bed.daemon.statusJSON()["backend"]?["modelSwitch"]?["inProgress"] == true)
        bed.clock.advance(by: CoordinatorBed.pullMs)
        await settle()
        #expect(bed.transport.calls(to: "/api/pull").isEmpty, "no pull while new work is held")

        // Plugged in and charged, past the resume dwell.
        await bed.daemon.updateReading(Self.reading(battery: 90, mains: true), monotonicMs: 1_000)
        await bed.daemon.updateReading(Self.reading(battery: 90, mains: true), monotonicMs: 31_000)
        bed.clock.advance(by: CoordinatorBed.pullMs)
        await eventually("the ack") { bed.transport.calls(to: ack).count == 1 }
        #expect(bed.transport.calls(to: "/api/pull").first?.body == ["model": "big:7b", "stream": true])
        #expect(bed.transport.calls(to: ack).first?.body == ["ok": true])
        let phases = bed.transport.calls(to: status).compactMap { $0.body?["phase"]?.stringValue }
        #expect(phases == ["starting", "held", "pulling_model", "pulling_model", "done"], "one progress at once, the last held back, then done")
        #expect(bed.transport.calls(to: status).last(where: { $0.body?["phase"] == "pulling_model" })?.body?["progressPct"]?.doubleValue == 100)
        #expect(await bed.daemon.activeModel == "big:7b")
        #expect(await bed.daemon.model.switchStatus?.phase == .done)
        #expect(FileManager.default.fileExists(atPath: bed.dir + "/active-model.json"))

        // The next heartbeat reports it; the generation uses it.
        bed.clock.advance(by: CoordinatorBed.heartbeatMs)
        await eventually("a heartbeat with the new model") {
            bed.transport.calls(to: "/heartbeat").last?.body?["activeModel"] == "big:7b"
        }
        #expect(bed.transport.calls(to: "/heartbeat").last?.body?["modelSwapInProgress"] == false)
        await bed.finish()
    }

    static func allowed(_ config: inout WorkerConfig) {
        config.backend.allowRemoteModelSwitch = true
        config.policy.allowRemoteModelSwitch = true
    }

    func scriptCoordinator(_ bed: CoordinatorBed, ack ok: Bool) async -> (status: String, ack: String) {
        let (status, ack) = await paths(bed)
        bed.transport.script("/heartbeat", .json(200, Self.request))
        for _ in 0..<8 { bed.transport.script(status, .json(200, #"{"ok":true}"#)) }
        bed.transport.script(ack, .json(200, #"{"ok":\#(ok),"pending":false}"#))
        return (status, ack)
    }

    // Hardening #26 row 1: held on metered as the work loop is, and status says by what.
    @Test func aMeteredConnectionUnderHoldHoldsASwitchAndStatusSaysSo() async throws {
        let bed = try CoordinatorBed(configure: Self.allowed)
        let (status, ack) = await scriptCoordinator(bed, ack: true)
        bed.transport.script("/api/pull", .json(200, Self.pull))
        var metered = HostServices()
        metered.meteredRaw = 1
        await bed.daemon.updateHost(metered)
        bed.start()
        await eventually("the switch to wait for the metered connection") {
            await bed.daemon.model.switchStatus?.phase == .held && bed.transport.calls(to: status).count == 2
        }
        #expect(await bed.daemon.model.switchStatus?.message.contains("metered") == true)
        #expect(bed.transport.calls(to: status).last?.body?["message"]?.stringValue?.contains("metered") == true)
        bed.clock.advance(by: CoordinatorBed.pullMs)
        await settle()
        #expect(bed.transport.calls(to: "/api/pull").isEmpty, "no download over a metered connection under hold")
        #expect(bed.transport.calls(to: ack).isEmpty)

        await bed.daemon.updateHost(HostServices())
        bed.clock.advance(by: CoordinatorBed.pullMs)
        await eventually("the ack once unmetered") { bed.transport.calls(to: ack).count == 1 }
        #expect(bed.transport.calls(to: ack).first?.body == ["ok": true])
        #expect(await bed.daemon.activeModel == "big:7b")
        await bed.finish()
    }

    @Test func aSuspendHoldsASwitch() async throws {
        let bed = try CoordinatorBed(configure: {
            Self.allowed(&$0); $0.network.onMetered = .allow
        })
        _ = await scriptCoordinator(bed, ack: true)
        var suspending = HostServices()
        suspending.sleep = .preparing
        await bed.daemon.updateHost(suspending)
        bed.start()
        await eventually("the switch to wait for the resume") { await bed.daemon.model.switchStatus?.phase == .held }
        #expect(await bed.daemon.model.switchStatus?.message.contains("host-sleeping") == true)
        bed.clock.advance(by: CoordinatorBed.pullMs)
        await settle()
        #expect(bed.transport.calls(to: "/api/pull").isEmpty)
        await bed.finish()
    }

    // Row 2: the permission is read again after every hold.
    @Test func turningThePermissionOffWhileASwitchIsHeldRefusesItAndAcksNotOK() async throws {
        let bed = try CoordinatorBed(configure: Self.allowed)
        let (status, ack) = await scriptCoordinator(bed, ack: false)
        bed.transport.script("/api/pull", .json(200, Self.pull))
        await bed.daemon.updateReading(Self.reading(battery: 10, mains: false), monotonicMs: 0)
        bed.start()
        await eventually("the switch to wait for the policy") { await bed.daemon.model.switchStatus?.phase == .held }
        _ = await bed.daemon.changePolicy(.set(key: "allowRemoteModelSwitch", value: false), by: "test")
        // The power hold ends too: only the permission stands in the way now.
        await bed.daemon.updateReading(Self.reading(battery: 90, mains: true), monotonicMs: 1_000)
        await bed.daemon.updateReading(Self.reading(battery: 90, mains: true), monotonicMs: 31_000)
        bed.clock.advance(by: CoordinatorBed.pullMs)
        await eventually("the ack") { bed.transport.calls(to: ack).count == 1 }
        #expect(bed.transport.calls(to: ack).first?.body?["ok"] == false)
        #expect(bed.transport.calls(to: ack).first?.body?["error"]?.stringValue?.contains("allowRemoteModelSwitch") == true)
        #expect(bed.transport.calls(to: "/api/pull").isEmpty)
        #expect(bed.transport.calls(to: status).last?.body?["phase"] == "refused")
        #expect(await bed.daemon.model.switchStatus?.phase == .refused)
        #expect(await bed.daemon.activeModel == "qwen2.5-coder:1.5b")
        await bed.finish()
    }

    @Test func turningThePermissionOffCancelsARunningPull() async throws {
        let bed = try CoordinatorBed(configure: Self.allowed)
        let (_, ack) = await scriptCoordinator(bed, ack: false)
        bed.transport.script("/api/pull", .hang)
        bed.start()
        await eventually("the pull to start") { bed.transport.calls(to: "/api/pull").count == 1 }
        _ = await bed.daemon.changePolicy(.set(key: "allowRemoteModelSwitch", value: false), by: "test")
        bed.clock.advance(by: CoordinatorBed.pullMs)
        await eventually("the ack") { bed.transport.calls(to: ack).count == 1 }
        #expect(bed.transport.calls(to: ack).first?.body?["ok"] == false)
        #expect(await bed.daemon.model.switchStatus?.phase == .refused)
        #expect(await bed.daemon.activeModel == "qwen2.5-coder:1.5b")
        await bed.finish()
    }

    // Row 4: a switch the session's end interrupts ends in a final phase.
    @Test func aSwitchInterruptedByTheSessionsEndSaysSoAndIsNoLongerInProgress() async throws {
        let bed = try CoordinatorBed(configure: Self.allowed)
        let (status, ack) = await scriptCoordinator(bed, ack: true)
        await bed.daemon.updateReading(Self.reading(battery: 10, mains: false), monotonicMs: 0)
        bed.start()
        await eventually("the switch to wait for the policy") { await bed.daemon.model.switchStatus?.phase == .held }
        #expect(await bed.daemon.model.switchStatus?.inProgress == true)
        await bed.finish()
        await eventually("the final phase") { await bed.daemon.model.switchStatus?.phase == .interrupted }
        #expect(await bed.daemon.model.switchStatus?.inProgress == false, "heartbeats say modelSwapInProgress from this")
        #expect(await bed.daemon.statusJSON()["backend"]?["modelSwitch"]?["inProgress"] == false)
        await eventually("the coordinator told") { bed.transport.calls(to: status).last?.body?["phase"] == "interrupted" }
        #expect(bed.transport.calls(to: ack).isEmpty, "no ack: the coordinator asks the next session again")
    }
}

/// What a session remembers of switch requests stays bounded (hardening #26 row 10).
@Suite struct ModelSwitchMemory {
    @Test func aSessionRemembersTheLast64AcknowledgedSwitchesAndOutcomes() async throws {
        let bed = try CoordinatorBed()
        let link = CoordinatorLink(
            config: await bed.daemon.config, agentID: await bed.daemon.agentID, files: WorkerStateFiles(directory: bed.directory),
            daemon: bed.daemon, logger: Logger(label: "test", handler: MemoryLogHandler()), transport: bed.transport, clock: bed.clock)
        for i in 0..<1_000 {
            await link.recordSwitchOutcome("rollout-\(i)", ok: false, error: nil)
            if i % 2 == 0 { await link.forgetSwitchOutcome("rollout-\(i)") }
        }
        #expect(await link.switches.acknowledged.count == 64)
        #expect(await link.switches.outcomes.count == 64)
        #expect(await link.switches.acknowledged.contains("rollout-998"))
        #expect(await !link.switches.acknowledged.contains("rollout-0"))
        #expect(await link.switchOutcome("rollout-999")?.ok == false)
    }
}
