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
        Case(
            name: "only a mouse battery", supplies: [("hid-mouse", ["type": "Battery", "scope": "Device", "status": "Discharging"])], external: true),
        Case(
            name: "Mains online", supplies: [("AC", ["type": "Mains", "online": "1"]), ("BAT0", ["type": "Battery", "status": "Charging"])],
            external: true),
        Case(
            name: "Mains offline, battery discharging",
            supplies: [("AC", ["type": "Mains", "online": "0"]), ("BAT0", ["type": "Battery", "status": "Discharging"])], external: false),
        Case(
            name: "Mains offline though the battery claims Full",
            supplies: [("AC", ["type": "Mains", "online": "0"]), ("BAT0", ["type": "Battery", "status": "Full"])], external: false),
        Case(
            name: "USB-C online",
            supplies: [
                ("ucsi-source-psy-USBC000:001", ["type": "USB", "online": "1"]), ("AC", ["type": "Mains", "online": "0"]),
                ("BAT0", ["type": "Battery", "status": "Charging"]),
            ], external: true),
        Case(
            name: "Wireless online", supplies: [("wlc", ["type": "Wireless", "online": "1"]), ("BAT0", ["type": "Battery", "status": "Charging"])],
            external: true),
        Case(
            name: "UPS online", supplies: [("ups", ["type": "UPS", "online": "1"]), ("BAT0", ["type": "Battery", "status": "Discharging"])],
            external: true, draining: true),
        Case(
            name: "Mains online, battery discharging",
            supplies: [("ADP1", ["type": "Mains", "online": "1"]), ("BAT0", ["type": "Battery", "status": "Discharging"])], external: true,
            draining: true),
        Case(name: "no adapter, battery Charging", supplies: [("BAT0", ["type": "Battery", "status": "Charging"])], external: true),
        Case(name: "no adapter, battery Full", supplies: [("BAT0", ["type": "Battery", "status": "Full"])], external: true),
        Case(name: "no adapter, battery Not charging", supplies: [("BAT0", ["type": "Battery", "status": "Not charging"])], external: true),
        Case(name: "no adapter, battery Discharging", supplies: [("BAT0", ["type": "Battery", "status": "Discharging"])], external: false),
        Case(name: "no adapter, battery status Unknown", supplies: [("BAT0", ["type": "Battery", "status": "Unknown"])], external: nil),
        Case(name: "no adapter, battery status garbage", supplies: [("BAT0", ["type": "Battery", "status": "abc"])], external: nil),
        Case(
            name: "adapter online unreadable defers to Charging",
            supplies: [("AC", ["type": "Mains", "online": "abc"]), ("BAT0", ["type": "Battery", "status": "Charging"])], external: true),
        Case(
            name: "adapter online unreadable defers to Discharging",
            supplies: [("AC", ["type": "Mains", "online": ""]), ("BAT0", ["type": "Battery", "status": "Discharging"])], external: false),
        Case(
            name: "adapter online unreadable, battery status unknown", supplies: [("AC", ["type": "Mains"]), ("BAT0", ["type": "Battery"])],
            external: nil),
        Case(
            name: "a Device-scope charger online does not count",
            supplies: [("dock", ["type": "USB", "scope": "Device", "online": "1"]), ("BAT0", ["type": "Battery", "status": "Discharging"])],
            external: false),
        Case(
            name: "a battery bay without a battery does not count",
            supplies: [("BAT1", ["type": "Battery", "present": "0", "status": "Discharging"])], external: true),
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
            PowerSupply.classify(
                name: "BAT\(index)",
                attributes: SysfsAttributes(
                    text: [
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
        if Self.laptopCodes.contains(code) {
            expected = .laptop
        } else if code == 30 {
            expected = .tablet
        } else if Self.serverCodes.contains(code) {
            expected = .server
        } else if Self.desktopCodes.contains(code) {
            expected = .desktop
        } else {
            expected = nil
        }
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
