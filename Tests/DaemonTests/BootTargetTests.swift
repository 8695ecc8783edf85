import Foundation
import Testing
@testable import Daemon
import WorkerCore

/// systemd's boot target read from a stand-in root: the links as Debian and Raspberry Pi OS
/// ship them, an administrator's override, chains, loops and absent files.
@Suite struct BootTargetTests {
    let root = NSTemporaryDirectory() + "ecw-boot-" + UUID().uuidString

    func link(_ path: String, to target: String) throws {
        let full = root + path
        try FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: full, withDestinationPath: target)
    }

    @Test func debiansStockLinkWithoutADisplayManagerIsNoDesktop() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        try link("/lib/systemd/system/default.target", to: "graphical.target")
        let boot = SystemdBootTarget.read(root: root)
        #expect(boot == HostBootTarget(defaultTarget: "graphical.target", displayManager: false))
        #expect(!boot.isGraphicalDesktop)
    }

    @Test func anEnabledDisplayManagerMakesItADesktop() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        try link("/lib/systemd/system/default.target", to: "graphical.target")
        try link("/etc/systemd/system/display-manager.service", to: "/lib/systemd/system/lightdm.service")
        #expect(SystemdBootTarget.read(root: root).isGraphicalDesktop)
    }

    @Test func theAdministratorsLinkWinsAndChainsAreFollowedInsideTheRoot() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        try link("/lib/systemd/system/default.target", to: "graphical.target")
        try link("/etc/systemd/system/default.target", to: "/lib/systemd/system/runlevel3.target")
        try link("/lib/systemd/system/runlevel3.target", to: "multi-user.target")
        #expect(SystemdBootTarget.read(root: root).defaultTarget == "multi-user.target")
    }

    @Test func usrLibIsTheLastPlaceAndNothingAnywhereIsNoDefault() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        #expect(SystemdBootTarget.read(root: root) == HostBootTarget(defaultTarget: nil, displayManager: false))
        try link("/usr/lib/systemd/system/default.target", to: "../../../usr/lib/systemd/system/multi-user.target")
        #expect(SystemdBootTarget.read(root: root).defaultTarget == "multi-user.target")
    }

    @Test func aLoopOfLinksEndsWithAName() throws {
        defer { try? FileManager.default.removeItem(atPath: root) }
        try link("/etc/systemd/system/default.target", to: "a.target")
        try link("/etc/systemd/system/a.target", to: "default.target")
        let name = SystemdBootTarget.read(root: root).defaultTarget
        #expect(name == "a.target" || name == "default.target")
    }
}
