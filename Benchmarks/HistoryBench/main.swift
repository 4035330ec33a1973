import FerryCore
import FerryPostgres
import FerryPublisher
import FerryStore
import Foundation
import Logging

// `ferry-history-bench DATABASE_URL STORE VERSIONS INTERVAL DEVICES MARK...`: what a long history costs (issue 47).
// Creates `history_items` (10,000 rows) in DATABASE_URL, then publishes VERSIONS versions into STORE on a simulated
// clock (a version every INTERVAL seconds, a 30-day patch horizon, the default tiers), each after 2 rows changed (one
// of a hot set of 10, one spread). At each MARK (a version number) it prints one JSON line: the mean publish seconds
// of the 10 versions ending there, the store's manifest.json bytes, the manifest a device reads (bytes), and the
// versions the manifest retains and keeps as history. At each version of DEVICES (a comma-separated list; "-" for
// none) it keeps that version's published file as `STORE/../devices/at-VERSION.sqlite`, the database.db of a device
// that stopped there, and the last version's as `at-VERSIONS.sqlite`. Publishes run in this process (no process
// start per version).

let arguments = Array(CommandLine.arguments.dropFirst())
guard arguments.count >= 5, let versions = Int(arguments[2]), versions > 0, let interval = Double(arguments[3]),
    interval > 0
else {
    FileHandle.standardError.write(
        Data("usage: ferry-history-bench DATABASE_URL STORE VERSIONS INTERVAL DEVICES MARK...\n".utf8))
    exit(2)
}
let (databaseURL, store) = (arguments[0], URL(fileURLWithPath: arguments[1]))
let devices = Set(arguments[4].split(separator: ",").compactMap { Int($0) } + [versions])
let marks = Set(arguments.dropFirst(5).compactMap(Int.init))
let deviceFiles = store.deletingLastPathComponent().appendingPathComponent("devices", isDirectory: true)

/// Copies the current version's published file (a checkpoint's object, or the publisher's working copy of a step
/// version) to `deviceFiles/at-VERSION.sqlite`.
func keepDeviceFile(version: Int) throws {
    guard let entry = try FileSnapshotStore(root: store).storedManifest(for: "history")?.scopes[0] else {
        throw FerryError(.store, "no manifest after version \(version)")
    }
    let sha = entry.current.sha256
    let candidates = [
        store.appendingPathComponent("history/objects/\(sha).sqlite"),
        store.appendingPathComponent(".ferry-work/history/\(sha).sqlite"),
    ]
    guard let file = candidates.first(where: { FileManager.default.fileExists(atPath: $0.path) }) else {
        throw FerryError(.store, "version \(version)'s file \(sha).sqlite is neither an object nor the working copy")
    }
    try FileManager.default.createDirectory(at: deviceFiles, withIntermediateDirectories: true)
    try FileManager.default.copyItem(at: file, to: deviceFiles.appendingPathComponent("at-\(version).sqlite"))
}

do {
    let pg = try PostgresConnection(url: databaseURL)
    try pg.execute(
        """
        DROP TABLE IF EXISTS history_items;
        CREATE TABLE history_items (id integer PRIMARY KEY, v integer NOT NULL, note text NOT NULL);
        INSERT INTO history_items SELECT g, 0, md5(g::text) FROM generate_series(1, 10000) g;
        """)
    try FileManager.default.createDirectory(at: store, withIntermediateDirectories: true)
    let template = store.deletingLastPathComponent().appendingPathComponent("history.yml")
    try Data("dataset: history\ntables:\n  - name: history_items\n".utf8).write(to: template)
    var logger = Logger(label: "ferry-history-bench")
    logger.logLevel = .error
    let start = Date(timeIntervalSince1970: 1_800_000_000)
    var seconds: [Double] = []
    for version in 1...versions {
        if version > 1 {
            try pg.execute(
                "UPDATE history_items SET v = v + 1, note = md5(id::text || '\(version)') WHERE id IN (\(version % 10 + 1), \((version * 7919) % 10000 + 1))"
            )
        }
        var configuration = Publisher.Configuration(
            templatePath: template.path, databaseURL: databaseURL, store: store)
        configuration.patchHorizon = .seconds(30 * 86_400)
        let now = start.addingTimeInterval(Double(version) * interval)
        configuration.clock = { now }
        let began = ContinuousClock.now
        let result = try Publisher(configuration: configuration, logger: logger).publishBlocking()
        seconds.append((ContinuousClock.now - began).inSeconds)
        guard result.version == version else {
            throw FerryError(.store, "published version \(result.version), expected \(version)")
        }
        if devices.contains(version) { try keepDeviceFile(version: version) }
        if version % 5_000 == 0 {
            let recent = seconds.suffix(100)
            let bytes = try FileSnapshotStore.fileSize(store.appendingPathComponent("history/manifest.json"))
            FileHandle.standardError.write(
                Data(
                    "  version \(version) of \(versions): \(String(format: "%.4f", recent.reduce(0, +) / Double(recent.count))) s a publish (mean of the last 100), store manifest \(bytes) bytes\n"
                        .utf8))
        }
        guard marks.contains(version) else { continue }
        let manifestURL = store.appendingPathComponent("history/manifest.json")
        guard let stored = try FileSnapshotStore(root: store).storedManifest(for: "history") else {
            throw FerryError(.store, "no manifest after version \(version)", path: manifestURL.path)
        }
        let entry = stored.scopes[0]
        let device = try JSONEncoder().encode(entry.manifest(dataset: "history"))
        let recent = seconds.suffix(10)
        let line: [String: Double] = [
            "version": Double(version), "publishSeconds": recent.reduce(0, +) / Double(recent.count),
            "storeManifestBytes": Double(try FileSnapshotStore.fileSize(manifestURL)),
            "deviceManifestBytes": Double(device.count), "retained": Double(entry.retained.count),
            "history": Double(entry.history?.count ?? 0),
        ]
        let json = try JSONSerialization.data(withJSONObject: line, options: [.sortedKeys])
        FileHandle.standardOutput.write(json + Data("\n".utf8))
    }
} catch {
    FileHandle.standardError.write(Data("ferry-history-bench: \(error)\n".utf8))
    exit(1)
}
