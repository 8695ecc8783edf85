#if canImport(Glibc)
import Glibc
#endif
import Posix
import WorkerCore

/// The sandbox's image, made on this host from Debian's packages: mmdebstrap bootstraps
/// a minimal Debian with python3 and nodejs into a tar, the engine imports the tar as a
/// local image. No image registry is involved.
public enum SandboxImage {
    /// What a build is made of and where it goes.
    public struct Recipe: Sendable, Equatable {
        public var engine = "podman"
        public var engineArguments: [String] = []
        public var tag = "localhost/edgecoder-sandbox:1"
        /// The Debian release (`bookworm`): the host's own by default.
        public var suite: String
        /// nil: mmdebstrap's default (deb.debian.org).
        public var mirror: String?

        public init(suite: String) { self.suite = suite }

        /// Why this recipe cannot be used; empty when it can.
        public var problems: [String] {
            var problems: [String] = []
            if !WorkerConfig.Execution.isWord(tag) || tag.hasPrefix("-") {
                problems.append("the tag must be an image name like localhost/edgecoder-sandbox:1, got '\(printable(tag))'")
            }
            if suite.isEmpty || !suite.unicodeScalars.allSatisfy({ ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "-" }) {
                problems.append("the suite must be a Debian release name like bookworm, got '\(printable(suite))'")
            }
            if let mirror, !(mirror.hasPrefix("http://") || mirror.hasPrefix("https://") || mirror.hasPrefix("file:/")) || mirror.contains(" ") {
                problems.append("the mirror must be an http(s) or file URL, got '\(printable(mirror))'")
            }
            return problems
        }
    }

    /// What goes into the image besides Debian's minimal base.
    public static let packages = ["python3", "nodejs"]

    /// mmdebstrap's arguments: a minimal base with the interpreters, without the
    /// documentation, man pages and translations no program needs, as a tar at `output`.
    public static func bootstrapArguments(_ recipe: Recipe, output: String) -> [String] {
        var arguments = ["--variant=minbase", "--include=" + packages.joined(separator: ","), "--format=tar"]
        for excluded in ["/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*", "/usr/share/lintian/*"] {
            arguments.append("--dpkgopt=path-exclude=" + excluded)
        }
        // The copyright files stay: the image holds Debian's packages and their licences.
        arguments.append("--dpkgopt=path-include=/usr/share/doc/*/copyright")
        arguments += [recipe.suite, output]
        if let mirror = recipe.mirror { arguments.append(mirror) }
        return arguments
    }

    /// The engine's `import`: the tar becomes the image `tag`, with a PATH, user nobody
    /// and /tmp as the working directory should anyone run it without our flags.
    public static func importArguments(_ recipe: Recipe, tar: String) -> [String] {
        recipe.engineArguments + [
            "import",
            "--change", "ENV PATH=/usr/local/bin:/usr/bin:/bin",
            "--change", "USER 65534:65534",
            "--change", "WORKDIR /tmp",
            tar, recipe.tag,
        ]
    }

    /// The host's Debian release from os-release's VERSION_CODENAME; nil when none.
    public static func releaseName(osRelease: String) -> String? {
        for line in osRelease.split(separator: "\n") where line.hasPrefix("VERSION_CODENAME=") {
            let value = line.dropFirst("VERSION_CODENAME=".count).trimmingCharacters(in: "\"'")
            return value.isEmpty ? nil : value
        }
        return nil
    }

    /// One step of a build: what it was, how long it took, whether it worked.
    public struct Step: Sendable, Equatable {
        public var name: String
        public var durationMs: Int64
        public var failure: String?
    }

    /// Bootstraps, imports and tries the image. `progress` hears each step as it starts.
    /// The tar is written under `workDirectory` and removed at the end.
    public static func build(_ recipe: Recipe, workDirectory: String, progress: @Sendable (String) -> Void) async -> [Step] {
        var steps: [Step] = []
        if let problem = recipe.problems.first { return [Step(name: "recipe", durationMs: 0, failure: problem)] }
        let environment = ContainerSandbox.engineEnvironment(inherited: Posix.environment)
        let searchPath = environment["PATH"] ?? ""
        guard let mmdebstrap = findExecutable("mmdebstrap", searchPath: searchPath) else {
            return [Step(name: "bootstrap", durationMs: 0, failure: "mmdebstrap is not installed (apt-get install mmdebstrap)")]
        }
        let settings = ContainerSandbox.Settings(engine: recipe.engine, engineArguments: recipe.engineArguments, image: recipe.tag, timeoutMs: 60_000)
        let sandbox = ContainerSandbox(settings, searchPath: searchPath)
        let engine: String
        switch sandbox.engineExecutable() {
        case .success(let path): engine = path
        case .failure(let missing): return [Step(name: "engine", durationMs: 0, failure: missing.message)]
        }
        var template = Array("\(workDirectory)/edgecoder-sandbox-XXXXXX".utf8CString)
        guard template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) != nil else {
            return [
                Step(name: "bootstrap", durationMs: 0, failure: "cannot make a directory in \(workDirectory): \(String(cString: strerror(errno)))")
            ]
        }
        let directory = String(decoding: template.prefix(while: { $0 != 0 }).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let tar = directory + "/rootfs.tar"
        defer {
            unlink(tar)
            rmdir(directory)
        }

        progress("bootstrapping Debian \(recipe.suite) with \(packages.joined(separator: " and ")) (mmdebstrap; minutes)")
        let bootstrap = await ChildProcess.run(
            mmdebstrap, arguments: bootstrapArguments(recipe, output: tar), environment: environment,
            timeoutMs: 3_600_000, outputLimit: 65_536, mergeOutput: true)
        steps.append(
            Step(
                name: "bootstrap", durationMs: bootstrap.durationMs,
                failure: bootstrap.outcome.succeeded ? nil : "mmdebstrap \(bootstrap.outcome): \(lastLines(bootstrap.stdout.text))"))
        guard bootstrap.outcome.succeeded else { return steps }

        progress("importing \(tar) as \(recipe.tag) (\(recipe.engine) import)")
        let imported = await ChildProcess.run(
            engine, arguments: importArguments(recipe, tar: tar), environment: environment,
            timeoutMs: 1_800_000, outputLimit: 65_536, mergeOutput: true)
        steps.append(
            Step(
                name: "import", durationMs: imported.durationMs,
                failure: imported.outcome.succeeded ? nil : "\(recipe.engine) import \(imported.outcome): \(lastLines(imported.stdout.text))"))
        guard imported.outcome.succeeded else { return steps }

        for (language, code, expected) in [
            (CodeLanguage.python, "import sys; print('python', sys.version.split()[0])", "python "),
            (.javascript, "console.log('node', process.version)", "node v"),
        ] {
            progress("running a \(language.rawValue) program in the image")
            let run = await sandbox.run(language, code: code)
            let worked = run.succeeded && run.stdout.hasPrefix(expected)
            steps.append(
                Step(
                    name: "\(language.rawValue) check (\(worked ? run.stdout.trimmingCharacters(in: "\n") : "failed"))", durationMs: run.durationMs,
                    failure: worked ? nil : "a trivial \(language.rawValue) program \(run.ending): \(lastLines(run.stderr))"))
        }
        return steps
    }

    static func lastLines(_ text: String, count: Int = 5) -> String {
        text.split(separator: "\n").suffix(count).map { printable(String($0), limit: 300) }.joined(separator: " | ")
    }
}

extension Substring {
    fileprivate func trimmingCharacters(in set: String) -> String {
        String(self).trimmingCharacters(in: set)
    }
}

extension String {
    fileprivate func trimmingCharacters(in set: String) -> String {
        var scalars = Substring.UnicodeScalarView(unicodeScalars)
        while let first = scalars.first, set.unicodeScalars.contains(first) { scalars.removeFirst() }
        while let last = scalars.last, set.unicodeScalars.contains(last) { scalars.removeLast() }
        return String(scalars)
    }
}
