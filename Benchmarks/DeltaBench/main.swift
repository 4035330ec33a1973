import FerryCore
import Foundation

// `ferry-delta-bench OLD NEW`: the row-level difference between two published snapshot files, as SQLite's changeset
// (what Ferry ships: old and new values) and as its patchset (new values only), raw and gzip-compressed. Prints one
// JSON line. The published tables are the ones `ferry_tables` of NEW names, plus `ferry_tables` itself, as the
// publisher diffs them.

let arguments = CommandLine.arguments.dropFirst()
guard arguments.count == 2 else {
    FileHandle.standardError.write(Data("usage: ferry-delta-bench OLD.sqlite NEW.sqlite\n".utf8))
    exit(2)
}
let old = URL(fileURLWithPath: arguments[arguments.startIndex])
let new = URL(fileURLWithPath: arguments[arguments.startIndex + 1])

func gzipSize(_ data: Data) throws -> Int64 {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
        "ferry-delta-bench-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let raw = directory.appendingPathComponent("raw")
    try data.write(to: raw)
    return try Gzip.compressFile(from: raw, to: directory.appendingPathComponent("raw.gz"))
}

do {
    let tables =
        try SnapshotMetadata.read(from: SQLiteConnection(path: new.path, mode: .readOnly)).tables.map(\.name) + [
            "ferry_tables"
        ]
    let changeset = try Changeset.diff(from: old, to: new, tables: tables)
    let patchset = try Changeset.diff(from: old, to: new, tables: tables, patchset: true)
    let sizes: [String: Int64] = [
        "changeset": Int64(changeset.data.count), "changesetGzip": try gzipSize(changeset.data),
        "patchset": Int64(patchset.data.count), "patchsetGzip": try gzipSize(patchset.data),
    ]
    let json = try JSONSerialization.data(withJSONObject: sizes, options: [.sortedKeys])
    print(String(decoding: json, as: UTF8.self))
} catch {
    FileHandle.standardError.write(Data("ferry-delta-bench: \(error)\n".utf8))
    exit(1)
}
