import Testing
@testable import WorkerCore

/// Issue #26 row 9: an address list or `bonded` under `security: open` admits whoever
/// claims the address, since nothing on an unencrypted link proves it.
@Suite struct AllowedClientsWarningRules {
    static let list = BluetoothAllowedClients.addresses(["AA:BB:CC:DD:EE:FF"])

    @Test(arguments: [BluetoothAllowedClients.bonded, list])
    func openWithAnAdmissionByAddressWarns(_ allowed: BluetoothAllowedClients) throws {
        let warning = try #require(AllowedClientsWarning.of(security: .open, allowedClients: allowed))
        #expect(warning.path == "bluetooth.allowedClients")
        #expect(warning.message.contains("security is open"))
        #expect(warning.message.contains("\"encrypted\""))
    }

    @Test func theWarningSaysWhatTheListClaims() throws {
        let bonded = try #require(AllowedClientsWarning.of(security: .open, allowedClients: .bonded))
        #expect(bonded.message.hasPrefix("bluetooth.allowedClients is bonded"))
        let listed = try #require(AllowedClientsWarning.of(security: .open, allowedClients: Self.list))
        #expect(listed.message.hasPrefix("bluetooth.allowedClients lists addresses"))
        #expect(listed.message.contains("any device can claim"))
    }

    @Test func anyUnderOpenClaimsNothingSoNoWarning() {
        #expect(AllowedClientsWarning.of(security: .open, allowedClients: .any) == nil)
    }

    @Test(arguments: [BluetoothSecurity.encrypted, .authenticated], [BluetoothAllowedClients.any, .bonded, list])
    func anEncryptedLinkNeedsNoWarning(_ security: BluetoothSecurity, _ allowed: BluetoothAllowedClients) {
        #expect(AllowedClientsWarning.of(security: security, allowedClients: allowed) == nil)
    }

    @Test func anEmptyAddressListUnderOpenWarnsToo() {
        // An empty list admits nobody; still a list that would prove nothing once filled.
        #expect(AllowedClientsWarning.of(security: .open, allowedClients: .addresses([])) != nil)
    }

    @Test func theDefaultConfigHasNoWarningAndAnOpenListedOneHasOne() throws {
        #expect(AllowedClientsWarning.of(try WorkerConfig.parse(Array("{}".utf8))) == nil)
        let listed = try WorkerConfig.parse(Array(#"{"bluetooth": {"allowedClients": ["aa:bb:cc:dd:ee:ff"]}}"#.utf8))
        #expect(AllowedClientsWarning.of(listed)?.path == "bluetooth.allowedClients")
        let encrypted = try WorkerConfig.parse(Array(#"{"bluetooth": {"security": "encrypted", "allowedClients": "bonded"}}"#.utf8))
        #expect(AllowedClientsWarning.of(encrypted) == nil)
    }
}
