import Testing
@testable import WorkerCore

@Suite struct PowerThermalTests {
    @Test(arguments: [
        (
            [TripPoint(kind: .passive, milliC: 95_000), TripPoint(kind: .critical, milliC: 110_000)],
            ThermalBoundaries(fairAt: 85_000, seriousAt: 95_000, criticalAt: 105_000, fromTripPoints: true)
        ),
        (
            [TripPoint(kind: .critical, milliC: 110_000), TripPoint(kind: .passive, milliC: 97_000), TripPoint(kind: .passive, milliC: 95_000)],
            ThermalBoundaries(fairAt: 85_000, seriousAt: 95_000, criticalAt: 105_000, fromTripPoints: true)
        ),
        (
            [TripPoint(kind: .passive, milliC: 95_000), TripPoint(kind: .hot, milliC: 100_000), TripPoint(kind: .critical, milliC: 110_000)],
            ThermalBoundaries(fairAt: 85_000, seriousAt: 95_000, criticalAt: 95_000, fromTripPoints: true)
        ),
        ([TripPoint(kind: .active, milliC: 50_000)], ThermalBoundaries.defaults),
        ([], ThermalBoundaries.defaults),
        (
            [TripPoint(kind: .critical, milliC: 120_000)],
            ThermalBoundaries(fairAt: 60_000, seriousAt: 75_000, criticalAt: 115_000, fromTripPoints: true)
        ),
        (
            [TripPoint(kind: .critical, milliC: 70_000)],
            ThermalBoundaries(fairAt: 60_000, seriousAt: 65_000, criticalAt: 65_000, fromTripPoints: true)
        ),
        (
            [TripPoint(kind: .passive, milliC: 100_000)],
            ThermalBoundaries(fairAt: 90_000, seriousAt: 100_000, criticalAt: 100_000, fromTripPoints: true)
        ),
        ([TripPoint(kind: .passive, milliC: 70_000)], ThermalBoundaries(fairAt: 60_000, seriousAt: 70_000, criticalAt: 90_000, fromTripPoints: true)),
    ])
    func boundariesComeFromTripPoints(trips: [TripPoint], expected: ThermalBoundaries) {
        #expect(ThermalBoundaries.from(trips: trips) == expected)
    }

    static let zone = ThermalBoundaries.from(trips: [TripPoint(kind: .passive, milliC: 95_000), TripPoint(kind: .critical, milliC: 110_000)])

    @Test(arguments: [
        (Int64(84_999), ThermalState.nominal), (85_000, .fair), (94_999, .fair), (95_000, .serious),
        (104_999, .serious), (105_000, .critical), (-5_000, .nominal),
    ])
    func zoneWithTripPointsMapsAtItsEdges(milliC: Int64, expected: ThermalState) {
        #expect(Self.zone.state(milliC: milliC) == expected)
    }

    @Test(arguments: [
        (Int64(59_999), ThermalState.nominal), (60_000, .fair), (74_999, .fair), (75_000, .serious), (89_999, .serious), (90_000, .critical),
    ])
    func sensorWithoutTripPointsUses60_75_90(milliC: Int64, expected: ThermalState) {
        #expect(ThermalBoundaries.defaults.state(milliC: milliC) == expected)
    }

    @Test(arguments: [
        ("passive", "95000", TripPoint?.some(TripPoint(kind: .passive, milliC: 95_000))),
        ("critical\n", "110000\n", TripPoint(kind: .critical, milliC: 110_000)),
        ("passive", "-274000", nil), ("passive", "0", nil), ("passive", "abc", nil), ("passive", "999999999", nil),
        ("fan", "50000", nil), ("", "50000", nil),
    ])
    func tripPointsWithDisabledOrGarbageValuesAreIgnored(type: String, temp: String, expected: TripPoint?) {
        #expect(TripPoint.parse(type: Array(type.utf8), temp: Array(temp.utf8)) == expected)
    }

    @Test(arguments: [
        ("45000", Int64?.some(45_000)), ("150", 150), ("-5000", -5_000), ("", nil), ("abc", nil), ("999999999", nil), ("-274000", nil),
        ("4\u{0}5", nil),
    ])
    func temperatureIsUnknownWhenImplausible(text: String, expected: Int64?) {
        let sensor = ThermalSensor(source: .hwmon, name: "hwmon0/temp1_input", rawTemp: .value(Array(text.utf8)))
        #expect(sensor.milliC == expected)
        #expect((sensor.state != nil) == (expected != nil))
    }

    @Test func worstSensorWinsAndMirrorsAreIgnored() {
        let zone = ThermalSensor(
            source: .thermalZone, name: "thermal_zone0", label: "acpitz", rawTemp: .value(Array("80000".utf8)),
            trips: [TripPoint(kind: .passive, milliC: 95_000), TripPoint(kind: .critical, milliC: 110_000)])
        let mirror = ThermalSensor(source: .hwmon, name: "hwmon0/temp1_input", label: "acpitz", rawTemp: .value(Array("80000".utf8)))
        let cpu = ThermalSensor(source: .hwmon, name: "hwmon1/temp1_input", label: "coretemp", rawTemp: .value(Array("61000".utf8)))
        let marked = ThermalSensor.markingMirrors([zone, mirror, cpu])
        #expect(marked[1].mirrorOf == "acpitz")
        #expect(marked[2].mirrorOf == nil)
        #expect(ThermalSensor.worstState(marked) == .fair)
        #expect(ThermalSensor.worstState([zone, mirror, cpu]) == .serious)
        #expect(ThermalSensor.worstState([]) == nil)
        #expect(ThermalSensor.worstState([ThermalSensor(source: .thermalZone, name: "z", rawTemp: .failed("No data available"))]) == nil)
    }
}
