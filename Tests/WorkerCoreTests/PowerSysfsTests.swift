import Testing
@testable import WorkerCore

private func sysfsBytes(_ text: String) -> [UInt8] { Array(text.utf8) }

@Suite struct PowerSysfsTextTests {
    @Test(arguments: [
        ("42\n", Int64?.some(42)),
        (" 42 \n", 42),
        ("0", 0),
        ("100", 100),
        ("", nil),
        ("\n", nil),
        ("abc", nil),
        ("150", nil),
        ("101", nil),
        ("-5", nil),
        ("99999999999999999999", nil),
        ("4\u{0}2", nil),
        ("42\u{0}", nil),
        ("0x2a", nil),
        ("4 2", nil),
        ("1e2", nil),
        ("42.0", nil),
    ])
    func percentageAttributeIsUnknownUnlessAWholeNumberInRange(text: String, expected: Int64?) {
        #expect(SysfsText.integer(sysfsBytes(text), in: 0...100) == expected)
    }

    @Test func missingAttributeIsUnknown() {
        #expect(SysfsText.integer(nil, in: 0...100) == nil)
        #expect(SysfsText.value(nil) == nil)
    }

    @Test(arguments: [
        ([UInt8]("Not charging\n".utf8), String?.some("Not charging")),
        ([0xFF, 0xFE], nil),
        ([UInt8]("Char\u{1}ging".utf8), nil),
        ([UInt8](repeating: UInt8(ascii: "a"), count: 4097), nil),
        ([UInt8](repeating: UInt8(ascii: "a"), count: 4096), String(repeating: "a", count: 4096)),
    ])
    func textAttributeRejectsBinaryAndOversizedContent(input: [UInt8], expected: String?) {
        #expect(SysfsText.value(input) == expected)
    }
}

@Suite struct PowerSupplyClassificationTests {
    static func supply(_ name: String, _ text: [String: String]) -> PowerSupply {
        PowerSupply.classify(name: name, attributes: SysfsAttributes(text: text))
    }

    @Test(arguments: [
        ("Mains", PowerSupply.Kind?.some(.mains)), ("USB", .usb), ("Battery", .battery), ("UPS", .ups),
        ("Wireless", .wireless), ("USB_C", .usb), ("USB_PD", .usb), ("USB_DCP", .usb), ("BrickID", .usb),
        ("mains", nil), ("Unknown", nil), ("", nil), ("Battery\u{0}", nil),
    ])
    func typeNamesTheKernelDefinesAreRecognised(type: String, kind: PowerSupply.Kind?) {
        #expect(Self.supply("X", ["type": type]).kind == kind)
    }

    @Test(arguments: [
        (["type": "Battery"], PowerSupply.Role.systemBattery),
        (["type": "Battery", "scope": "System"], .systemBattery),
        (["type": "Battery", "scope": "Unknown"], .systemBattery),
        (["type": "Battery", "scope": "Device"], .ignoredDeviceScope),
        (["type": "Battery", "present": "0"], .ignoredNotPresent),
        (["type": "Battery", "present": "1"], .systemBattery),
        (["type": "Mains"], .external),
        (["type": "USB", "scope": "Device"], .ignoredDeviceScope),
        (["type": "abc"], .ignoredUnknownType),
        ([:], .ignoredUnknownType),
    ])
    func roleFollowsTypeScopeAndPresence(attributes: [String: String], role: PowerSupply.Role) {
        #expect(Self.supply("X", attributes).role == role)
    }

    @Test(arguments: [("0", Bool?.some(false)), ("1", true), ("2", true), ("3", nil), ("", nil), ("abc", nil), ("-1", nil)])
    func onlineIsReadAsTheKernelDocumentsIt(text: String, online: Bool?) {
        #expect(Self.supply("AC", ["type": "Mains", "online": text]).online == online)
    }

    @Test(arguments: [
        ("Charging", PowerSupply.Status?.some(.charging)), ("Discharging", .discharging), ("Full", .full),
        ("Not charging", .notCharging), ("Unknown", .unknown), ("charging", nil), ("", nil),
    ])
    func statusIsOneOfTheKernelsWords(text: String, status: PowerSupply.Status?) {
        #expect(Self.supply("BAT0", ["type": "Battery", "status": text]).status == status)
    }

    @Test(arguments: [("0", Int64?.none), ("-5", nil), ("abc", nil), ("57000000", 57_000_000), ("1000000000001", nil)])
    func fullCapacityMustBePositiveAndPlausible(text: String, expected: Int64?) {
        let battery = Self.supply("BAT0", ["type": "Battery", "energy_full": text, "charge_full": text])
        #expect(battery.energyFull == expected)
        #expect(battery.chargeFull == expected)
    }
}

@Suite struct PowerExternalAndBatteryTests {
    typealias S = [String: String]
    static func supplies(_ list: [(String, S)]) -> [PowerSupply] {
        list.map { PowerSupply.classify(name: $0.0, attributes: SysfsAttributes(text: $0.1)) }
    }

    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var supplies: [(String, S)]
        var external: Bool?
        var draining = false
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(name: "no supplies at all (a desktop)", supplies: [], external: true),
        Case(name: "only a mouse battery", supplies: [("hid-mouse", ["type": "Battery", "scope": "Device", "status": "Discharging"])], external: true),
        Case(name: "Mains online", supplies: [("AC", ["type": "Mains", "online": "1"]), ("BAT0", ["type": "Battery", "status": "Charging"])], external: true),
        Case(name: "Mains offline, battery discharging", supplies: [("AC", ["type": "Mains", "online": "0"]), ("BAT0", ["type": "Battery", "status": "Discharging"])], external: false),
        Case(name: "Mains offline though the battery claims Full", supplies: [("AC", ["type": "Mains", "online": "0"]), ("BAT0", ["type": "Battery", "status": "Full"])], external: false),
        Case(name: "USB-C online", supplies: [("ucsi-source-psy-USBC000:001", ["type": "USB", "online": "1"]), ("AC", ["type": "Mains", "online": "0"]), ("BAT0", ["type": "Battery", "status": "Charging"])], external: true),
        Case(name: "Wireless online", supplies: [("wlc", ["type": "Wireless", "online": "1"]), ("BAT0", ["type": "Battery", "status": "Charging"])], external: true),
        Case(name: "UPS online", supplies: [("ups", ["type": "UPS", "online": "1"]), ("BAT0", ["type": "Battery", "status": "Discharging"])], external: true, draining: true),
        Case(name: "Mains online, battery discharging", supplies: [("ADP1", ["type": "Mains", "online": "1"]), ("BAT0", ["type": "Battery", "status": "Discharging"])], external: true, draining: true),
        Case(name: "no adapter, battery Charging", supplies: [("BAT0", ["type": "Battery", "status": "Charging"])], external: true),
        Case(name: "no adapter, battery Full", supplies: [("BAT0", ["type": "Battery", "status": "Full"])], external: true),
        Case(name: "no adapter, battery Not charging", supplies: [("BAT0", ["type": "Battery", "status": "Not charging"])], external: true),
        Case(name: "no adapter, battery Discharging", supplies: [("BAT0", ["type": "Battery", "status": "Discharging"])], external: false),
        Case(name: "no adapter, battery status Unknown", supplies: [("BAT0", ["type": "Battery", "status": "Unknown"])], external: nil),
        Case(name: "no adapter, battery status garbage", supplies: [("BAT0", ["type": "Battery", "status": "abc"])], external: nil),
        Case(name: "adapter online unreadable defers to Charging", supplies: [("AC", ["type": "Mains", "online": "abc"]), ("BAT0", ["type": "Battery", "status": "Charging"])], external: true),
        Case(name: "adapter online unreadable defers to Discharging", supplies: [("AC", ["type": "Mains", "online": ""]), ("BAT0", ["type": "Battery", "status": "Discharging"])], external: false),
        Case(name: "adapter online unreadable, battery status unknown", supplies: [("AC", ["type": "Mains"]), ("BAT0", ["type": "Battery"])], external: nil),
        Case(name: "a Device-scope charger online does not count", supplies: [("dock", ["type": "USB", "scope": "Device", "online": "1"]), ("BAT0", ["type": "Battery", "status": "Discharging"])], external: false),
        Case(name: "a battery bay without a battery does not count", supplies: [("BAT1", ["type": "Battery", "present": "0", "status": "Discharging"])], external: true),
    ]

    @Test(arguments: cases)
    func externalPowerAndDrainingFollowSpec31(c: Case) {
        let supplies = Self.supplies(c.supplies)
        #expect(PowerSupply.externalPower(supplies) == c.external)
        #expect(PowerSupply.draining(supplies) == c.draining)
    }

    @Test(arguments: [
        // (capacity, energy_full, charge_full) per battery, expected combined
        ([("90", "50000000", ""), ("30", "20000000", "")], Int?.some(73)),
        ([("80", "", "4000000"), ("20", "", "1000000")], 68),
        ([("80", "50000000", ""), ("20", "", "1000000")], 50),
        ([("80", "", ""), ("21", "", "")], 51),
        ([("42", "", "")], 42),
        ([("42", "0", "")], 42),
        ([("90", "50000000", ""), ("abc", "20000000", "")], nil),
        ([("150", "", "")], nil),
        ([("", "", "")], nil),
    ])
    func batteriesCombineWeightedByFullCapacity(batteries: [(String, String, String)], expected: Int?) {
        let supplies = batteries.enumerated().map { index, battery in
            PowerSupply.classify(name: "BAT\(index)", attributes: SysfsAttributes(text: [
                "type": "Battery", "capacity": battery.0, "energy_full": battery.1, "charge_full": battery.2,
            ].filter { !$0.value.isEmpty || $0.key == "capacity" }))
        }
        #expect(PowerSupply.combinedBatteryPct(supplies) == expected)
    }

    @Test func deviceBatteriesAndEmptyBaysDoNotCountTowardsCharge() {
        let supplies = Self.supplies([
            ("BAT0", ["type": "Battery", "capacity": "80"]),
            ("hid-mouse", ["type": "Battery", "scope": "Device", "capacity": "5"]),
            ("BAT1", ["type": "Battery", "present": "0", "capacity": "0"]),
        ])
        #expect(PowerSupply.combinedBatteryPct(supplies) == 80)
        #expect(PowerSupply.combinedBatteryPct(Self.supplies([("hid-mouse", ["type": "Battery", "scope": "Device", "capacity": "5"])])) == nil)
    }
}

@Suite struct PowerHostSignalTests {
    @Test(arguments: [
        ("low-power\n", Bool?.some(true)), ("balanced", false), ("performance", false), ("quiet", false), ("cool", false),
        ("balanced-performance", false), ("custom", false), ("", nil), ("abc", nil), ("low-power\u{0}", nil), ("Low-Power", nil),
    ])
    func lowPowerModeComesFromPlatformProfile(text: String, expected: Bool?) {
        #expect(PlatformProfile.lowPowerMode(Array(text.utf8)) == expected)
    }

    @Test func missingPlatformProfileIsUnknown() {
        #expect(PlatformProfile.lowPowerMode(nil) == nil)
    }

    static let laptopCodes: Set<Int64> = [8, 9, 10, 14, 31, 32]
    static let serverCodes: Set<Int64> = [17, 23, 28, 29]
    static let desktopCodes: Set<Int64> = [3, 4, 5, 6, 7, 13, 15, 16, 24, 35, 36]

    @Test(arguments: Array(Int64(0)...127))
    func everyChassisCodeMapsAsSpec31Lists(code: Int64) {
        let expected: DeviceType?
        if Self.laptopCodes.contains(code) { expected = .laptop }
        else if code == 30 { expected = .tablet }
        else if Self.serverCodes.contains(code) { expected = .server }
        else if Self.desktopCodes.contains(code) { expected = .desktop }
        else { expected = nil }
        #expect(DeviceType(chassisCode: code) == expected)
        #expect(DeviceType(chassisType: Array("\(code)\n".utf8)) == expected)
    }

    @Test(arguments: [
        ("10", true, DeviceType.laptop), ("3", true, .desktop), ("23", false, .server), ("30", false, .tablet),
        ("2", true, .laptop), ("2", false, .desktop), ("", true, .laptop), ("abc", false, .desktop),
        ("150", false, .desktop), ("-3", true, .laptop), ("1\u{0}0", false, .desktop),
    ])
    func unknownChassisFallsBackOnTheBattery(text: String, hasBattery: Bool, expected: DeviceType) {
        #expect(DeviceType.resolve(chassisType: Array(text.utf8), hasSystemBattery: hasBattery) == expected)
    }

    @Test func missingChassisFallsBackOnTheBattery() {
        #expect(DeviceType.resolve(chassisType: nil, hasSystemBattery: true) == .laptop)
        #expect(DeviceType.resolve(chassisType: nil, hasSystemBattery: false) == .desktop)
    }
}

@Suite struct PowerProcfsTests {
    @Test(arguments: [
        ("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3 4\n", CPUTimes?.some(CPUTimes(idle: 800, total: 1000))),
        ("cpu  100 5 100 700 100 10 20 30 40 50\n", CPUTimes(idle: 800, total: 1065)),
        ("cpu 1 2 3 4\n", CPUTimes(idle: 4, total: 10)),
        ("cpu 1 2 3\n", nil),
        ("cpu0 1 2 3 4 5\n", nil),
        ("", nil),
        ("abc", nil),
        ("cpu  1 2 x 4 5\n", nil),
        ("cpu  1 2 -3 4 5\n", nil),
        ("cpu  18446744073709551615 1 0 0 0\n", nil),
        ("cpu  99999999999999999999999 1 0 0 0\n", nil),
        ("cpu  1 2 3\u{0} 4 5\n", nil),
    ])
    func procStatFirstLineParsesOrIsUnknown(text: String, expected: CPUTimes?) {
        #expect(CPUTimes.parse(procStat: Array(text.utf8)) == expected)
    }

    @Test(arguments: [
        (CPUTimes(idle: 800, total: 1000), CPUTimes(idle: 1500, total: 2000), Double?.some(30)),
        (CPUTimes(idle: 800, total: 1000), CPUTimes(idle: 1800, total: 2000), 0),
        (CPUTimes(idle: 800, total: 1000), CPUTimes(idle: 800, total: 2000), 100),
        (CPUTimes(idle: 800, total: 1000), CPUTimes(idle: 790, total: 1100), 100),
        (CPUTimes(idle: 800, total: 1000), CPUTimes(idle: 800, total: 1000), nil),
        (CPUTimes(idle: 800, total: 1000), CPUTimes(idle: 100, total: 500), nil),
    ])
    func cpuUsageIsTheNonIdleShareBetweenSamples(earlier: CPUTimes, later: CPUTimes, expected: Double?) {
        #expect(CPUTimes.usagePct(from: earlier, to: later) == expected)
    }

    @Test(arguments: [
        ("MemTotal:       16000000 kB\nMemFree:  1 kB\nMemAvailable:    4000000 kB\n", Double?.some(75)),
        ("MemAvailable: 8 kB\nMemTotal: 8 kB\n", 0),
        ("MemTotal: 16000000 kB\nMemFree: 1000 kB\n", nil),
        ("MemTotal: 0 kB\nMemAvailable: 0 kB\n", nil),
        ("MemTotal: 100 kB\nMemAvailable: 200 kB\n", nil),
        ("MemTotal: abc kB\nMemAvailable: 1 kB\n", nil),
        ("MemTotal: -100 kB\nMemAvailable: 1 kB\n", nil),
        ("", nil),
        ("\u{0}\u{0}\u{0}", nil),
    ])
    func memoryUsageIsOneMinusAvailableOverTotal(text: String, expected: Double?) {
        #expect(MemoryInfo.usagePct(meminfo: Array(text.utf8)) == expected)
    }
}

@Suite struct PowerThermalTests {
    @Test(arguments: [
        ([TripPoint(kind: .passive, milliC: 95_000), TripPoint(kind: .critical, milliC: 110_000)], ThermalBoundaries(fairAt: 85_000, seriousAt: 95_000, criticalAt: 105_000, fromTripPoints: true)),
        ([TripPoint(kind: .critical, milliC: 110_000), TripPoint(kind: .passive, milliC: 97_000), TripPoint(kind: .passive, milliC: 95_000)], ThermalBoundaries(fairAt: 85_000, seriousAt: 95_000, criticalAt: 105_000, fromTripPoints: true)),
        ([TripPoint(kind: .passive, milliC: 95_000), TripPoint(kind: .hot, milliC: 100_000), TripPoint(kind: .critical, milliC: 110_000)], ThermalBoundaries(fairAt: 85_000, seriousAt: 95_000, criticalAt: 95_000, fromTripPoints: true)),
        ([TripPoint(kind: .active, milliC: 50_000)], ThermalBoundaries.defaults),
        ([], ThermalBoundaries.defaults),
        ([TripPoint(kind: .critical, milliC: 120_000)], ThermalBoundaries(fairAt: 60_000, seriousAt: 75_000, criticalAt: 115_000, fromTripPoints: true)),
        ([TripPoint(kind: .critical, milliC: 70_000)], ThermalBoundaries(fairAt: 60_000, seriousAt: 65_000, criticalAt: 65_000, fromTripPoints: true)),
        ([TripPoint(kind: .passive, milliC: 100_000)], ThermalBoundaries(fairAt: 90_000, seriousAt: 100_000, criticalAt: 100_000, fromTripPoints: true)),
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

    @Test(arguments: [("45000", Int64?.some(45_000)), ("150", 150), ("-5000", -5_000), ("", nil), ("abc", nil), ("999999999", nil), ("-274000", nil), ("4\u{0}5", nil)])
    func temperatureIsUnknownWhenImplausible(text: String, expected: Int64?) {
        let sensor = ThermalSensor(source: .hwmon, name: "hwmon0/temp1_input", rawTemp: .value(Array(text.utf8)))
        #expect(sensor.milliC == expected)
        #expect((sensor.state != nil) == (expected != nil))
    }

    @Test func worstSensorWinsAndMirrorsAreIgnored() {
        let zone = ThermalSensor(source: .thermalZone, name: "thermal_zone0", label: "acpitz", rawTemp: .value(Array("80000".utf8)),
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
