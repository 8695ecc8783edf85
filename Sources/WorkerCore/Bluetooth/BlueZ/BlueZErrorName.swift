/// The D-Bus error names of BlueZ's API (doc/*-api.txt "Possible errors") that the worker
/// sends or matches, spelled once.
public enum BlueZErrorName: String, Sendable, CaseIterable {
    case alreadyExists = "org.bluez.Error.AlreadyExists"
    case canceled = "org.bluez.Error.Canceled"
    case doesNotExist = "org.bluez.Error.DoesNotExist"
    case failed = "org.bluez.Error.Failed"
    case invalidArguments = "org.bluez.Error.InvalidArguments"
    case invalidOffset = "org.bluez.Error.InvalidOffset"
    case notAuthorized = "org.bluez.Error.NotAuthorized"
    case notPermitted = "org.bluez.Error.NotPermitted"
    case notSupported = "org.bluez.Error.NotSupported"
    case rejected = "org.bluez.Error.Rejected"
}
