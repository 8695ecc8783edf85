import Testing
@testable import WorkerCore

/// Suspend, metered networks and power profiles (service §2), decided from what the host's
/// services said: pure.
@Suite struct HostServicesDecisions {
    @Test(arguments: [(UInt32(0), Bool?.none), (1, true), (2, false), (3, true), (4, false), (9, nil)])
    func networkManagersMeteredYesAndGuessYesCountAsMetered(raw: UInt32, metered: Bool?) {
        #expect(HostServices.isMetered(raw) == metered)
    }

    @Test func meteredHoldsOnlyUnderHold() {
        var host = HostServices()
        host.meteredRaw = 3
        #expect(host.hold(onMetered: .hold) == .metered)
        #expect(host.hold(onMetered: .allow) == nil)
        host.meteredRaw = 4
        #expect(host.hold(onMetered: .hold) == nil)
        host.meteredRaw = 1
        #expect(host.hold(onMetered: .hold, overNetwork: false) == nil, "a Bluetooth request does not use the connection")
        host.meteredRaw = nil
        #expect(host.hold(onMetered: .hold) == nil, "no NetworkManager: never held for it")
    }

    @Test func suspendHoldsWhateverTheNetworkAndComesFirst() {
        var host = HostServices()
        host.meteredRaw = 1
        host.sleep = .preparing
        #expect(host.hold(onMetered: .hold) == .hostSleeping)
        host.sleep = .suspending
        #expect(host.hold(onMetered: .allow) == .hostSleeping)
        #expect(host.hold(onMetered: .allow, overNetwork: false) == .hostSleeping, "Bluetooth requests too")
    }

    @Test(arguments: [
        (Bool?.some(false), String?.some("power-saver"), Bool?.some(false)),  // the kernel's profile wins
        (true, "performance", true),
        (nil, "power-saver", true),
        (nil, "balanced", false),
        (nil, "performance", false),
        (nil, nil, nil),
        (nil, "something-new", nil),
    ])
    func powerSaverIsLowPowerOnlyWithoutAPlatformProfile(platform: Bool?, profile: String?, expected: Bool?) {
        #expect(HostServices.lowPowerMode(platformProfile: platform, activeProfile: profile) == expected)
    }

    @Test func prepareForSleepStopsTakingWorkCheckpointsHeartbeatsThenReleases() {
        let (phase, steps) = HostServices.prepareForSleep(true, phase: .awake)
        #expect(phase == .preparing)
        #expect(steps == [.holdNewWork, .checkpoint, .heartbeat, .releaseInhibitor])
    }

    @Test func resumeRetakesTheInhibitorRereadsPowerAndPathAndHeartbeatsAtOnce() {
        for from in [HostServices.SleepPhase.preparing, .suspending] {
            let (phase, steps) = HostServices.prepareForSleep(false, phase: from)
            #expect(phase == .awake)
            #expect(steps == [.takeInhibitor, .rereadPower, .rereadPath, .heartbeat, .resumeWork])
        }
    }

    @Test func aRepeatedSignalDoesNothingTwiceAndAResumeWithoutSuspendStillRereads() {
        #expect(HostServices.prepareForSleep(true, phase: .suspending).steps.isEmpty)
        #expect(HostServices.prepareForSleep(true, phase: .preparing).steps.isEmpty)
        let orphan = HostServices.prepareForSleep(false, phase: .awake)
        #expect(orphan.phase == .awake)
        #expect(orphan.steps == [.rereadPower, .rereadPath, .heartbeat])
    }

    @Test func statusSaysWhatWasSeenIncludingAbsentServices() {
        var host = HostServices()
        host.busConnected = true
        host.logind = .absent("org.freedesktop.login1 is not on the system bus")
        host.networkManager = .present
        host.meteredRaw = 3
        let json = host.json
        #expect(json["systemBus"] == "connected")
        #expect(json["logind"]?["state"] == "absent")
        #expect(json["logind"]?["reason"] == "org.freedesktop.login1 is not on the system bus")
        #expect(json["networkManager"]?["metered"] == "guess-yes")
        #expect(json["powerProfiles"]?["state"] == "unknown")
    }
}
