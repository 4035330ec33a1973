import FerryCore
import FerryPostgres
import FerryS3
import FerryTestSupport
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A fresh PostgreSQL database loaded with templates/trips.pg.sql, a directory store the real `ferry publish`
/// writes, and a fresh bucket the store is copied into the way the bucket publisher writes it (objects first, the
/// manifest last, the same keys).
struct BucketWorld: Sendable {
    let database: TestDatabase
    let directory: URL
    let template: String
    let s3: S3Client
    let bucket: String
    let prefix = "store/"

    var storeDirectory: URL { directory.appendingPathComponent("store", isDirectory: true) }
    var storeURL: String { "s3://\(bucket)/\(prefix)" }

    static func make(_ label: String) async throws -> BucketWorld {
        let database = try TestDatabase.create(label)
        let root = TestPaths.packageRoot
        try database.connect().execute(
            try String(contentsOf: root.appendingPathComponent("templates/trips.pg.sql"), encoding: .utf8))
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "ferry-bucket-\(label)-\(UUID().uuidString.prefix(8))", isDirectory: true)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let (s3, bucket) = try await SeaweedFS.freshBucket(label)
        return BucketWorld(
            database: database, directory: directory,
            template: root.appendingPathComponent("templates/trips.yml").path, s3: s3, bucket: bucket)
    }

    /// The environment a `ferry serve` child needs to read the bucket.
    static func s3Environment(secret: String? = nil) throws -> [String: String] {
        [
            "AWS_ACCESS_KEY_ID": try SeaweedFS.variable("FERRY_TEST_S3_ACCESS_KEY"),
            "AWS_SECRET_ACCESS_KEY": try secret ?? SeaweedFS.variable("FERRY_TEST_S3_SECRET_KEY"),
            "AWS_ENDPOINT_URL": "",
        ]
    }

    static var endpoint: String { get throws { try SeaweedFS.variable("FERRY_TEST_S3_ENDPOINT") } }

    func sql(_ statement: String) throws { try database.connect().execute(statement) }

    /// `ferry publish` into the directory store, with `extra` flags.
    func publish(_ extra: [String] = []) async throws {
        let result = try await runFerry(
            [
                "publish", "--config", template, "--database-url", database.url, "--store", storeDirectory.path,
            ] + extra)
        guard result.status == 0 else { throw FerryError(.store, "ferry publish failed: \(result.stderr)") }
    }

    /// Copies the directory store into the bucket: every object first, then each manifest. Returns when the last
    /// manifest's PUT was answered.
    @discardableResult
    func copyToBucket() async throws -> Date {
        let fm = FileManager.default
        let datasets = try fm.contentsOfDirectory(atPath: storeDirectory.path).filter { !$0.hasPrefix(".") }
        for dataset in datasets {
            let objects = storeDirectory.appendingPathComponent(dataset).appendingPathComponent("objects")
            for name in try fm.contentsOfDirectory(atPath: objects.path).sorted() where !name.hasPrefix(".") {
                let data = try Data(contentsOf: objects.appendingPathComponent(name))
                try await s3.put(bucket: bucket, key: "\(prefix)\(dataset)/objects/\(name)", body: data)
            }
        }
        for dataset in datasets {
            let manifest = storeDirectory.appendingPathComponent(dataset).appendingPathComponent("manifest.json")
            try await s3.put(bucket: bucket, key: "\(prefix)\(dataset)/manifest.json", body: Data(contentsOf: manifest))
        }
        return Date()
    }

    /// Deletes every object, then the bucket.
    func deleteBucket() async throws {
        for object in try await s3.list(bucket: bucket, prefix: "") {
            try await s3.delete(bucket: bucket, key: object.key)
        }
        try await s3.deleteBucket(bucket)
    }

    func cleanUp() {
        database.drop()
        try? FileManager.default.removeItem(at: directory)  // a temp directory; a leftover costs nothing
    }
}

/// `ferry serve` as a child process on port 0, with its combined output (the log) readable while it runs.
final class BucketServeProcess: @unchecked Sendable {
    let process = Process()
    private(set) var url: URL!
    private let lock = NSLock()
    private var output = ""

    init(_ arguments: [String], environment: [String: String] = [:]) async throws {
        process.executableURL = TestPaths.ferryBinary
        process.arguments = ["serve", "--port", "0"] + arguments
        var env = ProcessInfo.processInfo.environment
        for (name, value) in environment { env[name] = value }
        process.environment = env
        let pipe = Pipe()
        process.standardError = pipe
        process.standardOutput = pipe
        pipe.fileHandleForReading.readabilityHandler = { [weak self] handle in
            let data = handle.availableData
            guard let self, !data.isEmpty else { return }
            self.lock.withLock { self.output += String(decoding: data, as: UTF8.self) }
        }
        try process.run()
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            let text = log
            if let range = text.range(of: #"listening on http://127\.0\.0\.1:\d+"#, options: .regularExpression) {
                url = URL(string: String(text[range].dropFirst("listening on ".count)))
                return
            }
            guard process.isRunning else { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        stop()
        throw FerryError(.network, "ferry serve did not start: \(log)")
    }

    var log: String { lock.withLock { output } }

    /// Waits (with a deadline) until the log contains `text`.
    func waitForLog(_ text: String, seconds: Double = 30) async throws {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if log.contains(text) { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw FerryError(.network, "the server's log never said '\(text)': \(log)")
    }

    func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
    }

    deinit { stop() }
}

/// One HTTP answer, read with curl.
struct HTTPAnswer: Sendable {
    var status: Int
    /// Header names in lower case; `date` left out (it differs between any two answers).
    var headers: [String: String]
    var body: Data
}

/// GET (or HEAD) `path` on `server` with curl.
func httpGet(_ server: URL, _ path: String, headers: [String: String] = [:], head: Bool = false) async throws
    -> HTTPAnswer
{
    let bodyFile = FileManager.default.temporaryDirectory.appendingPathComponent("ferry-body-\(UUID().uuidString)")
    defer { try? FileManager.default.removeItem(at: bodyFile) }  // a temp file; a leftover costs nothing
    var arguments = ["-sS", "-D", "-", "-o", bodyFile.path]
    if head { arguments.append("-I") }
    for (name, value) in headers.sorted(by: { $0.key < $1.key }) { arguments += ["-H", "\(name): \(value)"] }
    arguments.append(server.absoluteString + path)
    let result = try await runProcess(URL(fileURLWithPath: "/usr/bin/curl"), arguments, timeout: 60)
    guard result.status == 0 else { throw FerryError(.network, "curl \(path) failed: \(result.stderr)") }
    var lines = result.stdout.components(separatedBy: "\r\n")
    let statusLine = lines.removeFirst()
    let status = Int(statusLine.split(separator: " ").dropFirst().first ?? "") ?? 0
    var fields: [String: String] = [:]
    for line in lines {
        guard let colon = line.firstIndex(of: ":") else { continue }
        let name = line[..<colon].lowercased()
        if name == "date" { continue }
        fields[name] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
    }
    // curl writes no file for an answer without a body (a 304); with -I it writes the head (Date included) into the
    // file too, which is not a body.
    if head { return HTTPAnswer(status: status, headers: fields, body: Data()) }
    return HTTPAnswer(status: status, headers: fields, body: (try? Data(contentsOf: bodyFile)) ?? Data())
}

/// Polls `condition` every 50 ms until it holds or `seconds` pass.
func waitUntil(_ what: String, seconds: Double = 30, _ condition: () async throws -> Bool) async throws {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if try await condition() { return }
        try await Task.sleep(for: .milliseconds(50))
    }
    throw FerryError(.network, "\(what) did not happen within \(Int(seconds)) s")
}
