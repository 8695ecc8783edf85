/// The version reported by `version`, `status`, the man page, the proxy and registration.
/// The only place it is written: `make deb` reads it from this line and checks that
/// debian/changelog's newest entry says the same (CHANGELOG.md has a section for it).
public let workerVersion = "0.2.0"
