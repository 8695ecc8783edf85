import Testing
@testable import WorkerCore

@Suite struct PowerTelemetryHeartbeatTests {
    static let allKeys = [
        "onExternalPower", "batteryLevelPct", "lowPowerMode", "onACPower", "batteryPct", "thermalState",
        "cpuUsagePct", "memoryUsagePct", "deviceType", "updatedAtMs",
    ]

    @Test func everyKnownValueIsSentInBothVocabularies() {
        let telemetry = PowerTelemetry(
            onExternalPower: false, batteryPct: 42, lowPowerMode: false, thermalState: .fair,
            cpuUsagePct: 12.345, memoryUsagePct: 50, deviceType: .laptop,
            hasSystemBattery: true, updatedAtMs: 1_700_000_000_123)
        let json = telemetry.heartbeatJSON
        #expect(json.objectValue?.keys == Self.allKeys)
        #expect(
            json.serialized
                == #"{"onExternalPower":false,"batteryLevelPct":42,"lowPowerMode":false,"onACPower":false,"batteryPct":42,"thermalState":"fair","cpuUsagePct":12.3,"memoryUsagePct":50,"deviceType":"laptop","updatedAtMs":1700000000123}"#
        )
    }

    @Test func unknownValuesAreLeftOutNeverNullOrMinusOne() {
        let json = PowerTelemetry(onExternalPower: true, deviceType: .desktop, updatedAtMs: 5).heartbeatJSON
        #expect(json.serialized == #"{"onExternalPower":true,"onACPower":true,"deviceType":"desktop","updatedAtMs":5}"#)
        let nothing = PowerTelemetry(cpuUsagePct: .nan, memoryUsagePct: .infinity, updatedAtMs: 5).heartbeatJSON
        #expect(nothing.objectValue?.keys == ["updatedAtMs"])
    }

    @Test(arguments: [(-3.0, 0.0), (100.04, 100.0), (250.0, 100.0), (99.96, 100.0), (0.04, 0.0), (33.36, 33.4)])
    func percentagesStayWithinTheCoordinatorsRange(value: Double, sent: Double) {
        let json = PowerTelemetry(batteryPct: Int(value), cpuUsagePct: value, memoryUsagePct: value, updatedAtMs: 1).heartbeatJSON
        #expect(json["cpuUsagePct"]?.doubleValue == sent)
        #expect(json["memoryUsagePct"]?.doubleValue == sent)
        let battery = json["batteryPct"]?.intValue ?? -1
        #expect((0...100).contains(battery))
    }
}
