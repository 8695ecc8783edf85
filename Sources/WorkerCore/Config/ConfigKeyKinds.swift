/// The kinds of keys the table is made of: each one reads, renders and copies its field the
/// same way, and says its type and default in the reference's words. A kind that knows its
/// range or cases derives the type from them and the default from `WorkerConfig()`, so the
/// reference cannot drift from what the decoder accepts.
extension ConfigKey {
    typealias Field<Value> = WritableKeyPath<WorkerConfig, Value> & Sendable

    static func make<Value: Sendable>(
        _ path: String, _ field: Field<Value>, type: String, defaultValue: String, reload: Reload, description: String,
        render: @escaping @Sendable (Value) -> String,
        read: @escaping @Sendable (inout ConfigReader, JSONValue, String) -> Value?
    ) -> ConfigKey {
        ConfigKey(
            path: path, type: type, defaultValue: defaultValue, description: description, reload: reload,
            read: { reader, value, path, config in read(&reader, value, path).map { config[keyPath: field] = $0 } },
            render: { render($0[keyPath: field]) },
            copy: { running, file in running[keyPath: field] = file[keyPath: field] })
    }

    /// An optional value: "-" when absent, so that removing it counts as a change.
    static func rendered(_ value: String?) -> String { value.map { "=" + $0 } ?? "-" }

    static func int(
        _ path: String, _ field: Field<Int64>, _ range: ClosedRange<Int64>, reload: Reload = .restart, _ description: String
    ) -> ConfigKey {
        make(
            path, field, type: "\(range.lowerBound)–\(range.upperBound)", defaultValue: "\(WorkerConfig()[keyPath: field])", reload: reload,
            description: description, render: { "\($0)" }, read: { $0.int($1, path: $2, range) })
    }

    /// An integer that may be absent (its default is another key's value, in `defaultValue`).
    static func optionalInt(
        _ path: String, _ field: Field<Int64?>, _ range: ClosedRange<Int64>, _ defaultValue: String, reload: Reload = .restart,
        _ description: String
    ) -> ConfigKey {
        make(
            path, field, type: "\(range.lowerBound)–\(range.upperBound)", defaultValue: defaultValue, reload: reload,
            description: description, render: { rendered($0.map { "\($0)" }) }, read: { $0.int($1, path: $2, range) })
    }

    /// `bluetooth.chunkPacingMs`: 0 was accepted once and loses answers (protocol-bluetooth
    /// §3), so it is refused with the reason rather than a bare range.
    static func chunkPacing(_ path: String, _ field: Field<Int64>, _ range: ClosedRange<Int64>, _ description: String) -> ConfigKey {
        var key = int(path, field, range, description)
        key = ConfigKey(
            path: key.path, type: key.type, defaultValue: key.defaultValue, description: key.description, reload: key.reload,
            read: { [read = key.read] reader, value, path, config in
                guard value.intValue == 0 else { return read(&reader, value, path, &config) }
                reader.problem(
                    path,
                    "must be in 1…1000: 0 sends notifications back to back, and bluetoothd spreads them over its parallel ATT bearers (EATT), so clients receive the chunks out of order and cannot read the answer"
                )
            }, render: key.render, copy: key.copy)
        return key
    }

    static func bool(_ path: String, _ field: Field<Bool>, reload: Reload = .restart, _ description: String) -> ConfigKey {
        make(
            path, field, type: "bool", defaultValue: "\(WorkerConfig()[keyPath: field])", reload: reload, description: description,
            render: { "\($0)" }, read: { $0.bool($1, path: $2) })
    }

    /// The cases in the reference's words: `"a"`, `"b"` or `"c"`.
    static func cases<E: RawRepresentable & CaseIterable>(_: E.Type) -> String where E.RawValue == String {
        let names = E.allCases.map { "`\"\($0.rawValue)\"`" }
        return names.count < 2 ? names.joined() : names.dropLast().joined(separator: ", ") + " or " + names.last!
    }

    static func choice<E: RawRepresentable & CaseIterable & Sendable>(
        _ path: String, _ field: Field<E>, reload: Reload = .restart, _ description: String
    ) -> ConfigKey where E.RawValue == String {
        make(
            path, field, type: cases(E.self), defaultValue: "`\"\(WorkerConfig()[keyPath: field].rawValue)\"`", reload: reload,
            description: description, render: \.rawValue, read: { $0.choice($1, path: $2, E.self) })
    }

    static func optionalChoice<E: RawRepresentable & CaseIterable & Sendable>(
        _ path: String, _ field: Field<E?>, _ defaultValue: String, reload: Reload = .restart, _ description: String
    ) -> ConfigKey where E.RawValue == String {
        make(
            path, field, type: cases(E.self), defaultValue: defaultValue, reload: reload, description: description,
            render: { rendered($0?.rawValue) }, read: { $0.choice($1, path: $2, E.self) })
    }

    /// A string; `check` returns why a value is refused (the value quoted only where it is
    /// not a secret).
    static func string(
        _ path: String, _ field: Field<String>, _ type: String, _ defaultValue: String, maxLength: Int, nonEmpty: Bool = false,
        check: @escaping @Sendable (String) -> String? = { _ in nil }, reload: Reload = .restart, _ description: String
    ) -> ConfigKey {
        make(
            path, field, type: type, defaultValue: defaultValue, reload: reload, description: description, render: { $0 },
            read: { reader, value, path in checked(&reader, value, path, maxLength: maxLength, nonEmpty: nonEmpty, check: check) })
    }

    static func optionalString(
        _ path: String, _ field: Field<String?>, _ type: String, _ defaultValue: String, maxLength: Int, nonEmpty: Bool = false,
        check: @escaping @Sendable (String) -> String? = { _ in nil }, reload: Reload = .restart, _ description: String
    ) -> ConfigKey {
        make(
            path, field, type: type, defaultValue: defaultValue, reload: reload, description: description, render: rendered,
            read: { reader, value, path in checked(&reader, value, path, maxLength: maxLength, nonEmpty: nonEmpty, check: check) })
    }

    static func checked(
        _ reader: inout ConfigReader, _ value: JSONValue, _ path: String, maxLength: Int, nonEmpty: Bool,
        check: (String) -> String?
    ) -> String? {
        guard let text = reader.string(value, path: path, maxLength: maxLength, nonEmpty: nonEmpty) else { return nil }
        if let problem = check(text) {
            reader.problem(path, problem)
            return nil
        }
        return text
    }

    static func url(_ path: String, _ field: Field<String>, _ type: String, _ defaultValue: String, _ description: String) -> ConfigKey {
        make(
            path, field, type: type, defaultValue: defaultValue, reload: .restart, description: description, render: { $0 },
            read: { $0.url($1, path: $2) })
    }

    static func optionalURL(
        _ path: String, _ field: Field<String?>, _ type: String, _ defaultValue: String, reload: Reload, _ description: String
    ) -> ConfigKey {
        make(
            path, field, type: type, defaultValue: defaultValue, reload: reload, description: description, render: rendered,
            read: { $0.url($1, path: $2) })
    }

    /// A value with a reader of its own (lists, Ollama's `keep_alive`).
    static func custom<Value: Sendable>(
        _ path: String, _ field: Field<Value>, _ type: String, _ defaultValue: String, reload: Reload = .restart,
        render: @escaping @Sendable (Value) -> String, read: @escaping @Sendable (inout ConfigReader, JSONValue, String) -> Value?,
        _ description: String
    ) -> ConfigKey {
        make(path, field, type: type, defaultValue: defaultValue, reload: reload, description: description, render: render, read: read)
    }

    /// A key of the `policy` section: `PowerPolicy.set` holds its checks (shared with
    /// `policy set`), and the file's keys are remembered for `policy show`'s sources. Live.
    static func policy(_ path: String, _ type: String, _ defaultValue: String, _ description: String) -> ConfigKey {
        let name = String(path.dropFirst("policy.".count))
        return ConfigKey(
            path: path, type: type, defaultValue: defaultValue, description: description, reload: .live,
            read: { reader, value, path, config in
                if let problem = config.policy.set(key: name, json: value) {
                    if case .unknownKey = problem { reader.unknown(path) } else { reader.problem(path, problem.message) }
                } else {
                    config.policyKeysInFile.insert(name)
                }
            },
            render: { $0.policy.json[name]?.serialized ?? "-" },
            copy: { running, file in
                if let value = file.policy.json[name] { _ = running.policy.set(key: name, json: value) }
                running.policyKeysInFile.remove(name)
                if file.policyKeysInFile.contains(name) { running.policyKeysInFile.insert(name) }
            })
    }

    /// `backend.allowRemoteModelSwitch`: also the default of the per-host policy key of the
    /// same name, so it sets both (and counts as a policy key the file sets).
    static func allowRemoteModelSwitch(_ path: String, _ description: String) -> ConfigKey {
        let name = "allowRemoteModelSwitch"
        return ConfigKey(
            path: path, type: "bool", defaultValue: "\(WorkerConfig().backend.allowRemoteModelSwitch)", description: description,
            reload: .live,
            read: { reader, value, path, config in
                guard let allowed = reader.bool(value, path: path) else { return }
                config.backend.allowRemoteModelSwitch = allowed
                config.policy.allowRemoteModelSwitch = allowed
                config.policyKeysInFile.insert(name)
            },
            render: { "\($0.backend.allowRemoteModelSwitch)" },
            copy: { running, file in
                running.backend.allowRemoteModelSwitch = file.backend.allowRemoteModelSwitch
                running.policy.allowRemoteModelSwitch = file.policy.allowRemoteModelSwitch
                running.policyKeysInFile.remove(name)
                if file.policyKeysInFile.contains(name) { running.policyKeysInFile.insert(name) }
            })
    }

    // The checks of single string values, in the words the operator reads.

    /// The key goes into an HTTP header; it is never quoted in a problem.
    static func apiKeyProblem(_ key: String) -> String? {
        key.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7F })
            ? nil : "must be printable ASCII without spaces (it goes into an HTTP header)"
    }

    static func adapterProblem(_ name: String) -> String? {
        WorkerConfig.isAdapterName(name) ? nil : "must be an adapter name like \"hci0\", got \"\(printable(name))\""
    }

    static func engineProblem(_ engine: String) -> String? {
        WorkerConfig.Execution.isWord(engine) ? nil : "must be a command name or an absolute path without spaces, got \"\(printable(engine))\""
    }

    static func imageProblem(_ image: String) -> String? {
        WorkerConfig.Execution.isWord(image) && !image.hasPrefix("-")
            ? nil : "must be an image name like \"localhost/edgecoder-sandbox:1\", got \"\(printable(image))\""
    }

    static func groupProblem(_ name: String) -> String? {
        WorkerConfig.isPosixName(name) ? nil : "must be a group name (letters, digits, '_', '-'), got \"\(printable(name))\""
    }
}
