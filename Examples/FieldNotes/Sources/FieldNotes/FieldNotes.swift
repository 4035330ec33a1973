import FerryClient
import FerryCore
import FerryGRDB
import Foundation
import GRDB
import Logging

/// FieldNotes: the smallest app on Ferry. It opens a client directory as a GRDB pool, observes one query and prints
/// each new result, writes an edit on a timer, syncs on another, and prints every `SyncStatus` change. An edit the
/// server did not take (rejected, merged with lost columns, or gone) is printed with the server's values; with
/// `--resolve resubmit` the app sends its lost values again on top of the server's row, with `--resolve discard` it
/// keeps the server's row. With `--attach FILE --attach-edit SQL` it attaches a photo once (FerryGRDB's
/// `ferry.attachments.add`) and writes the row that names it (`?` in the SQL is the photo's SHA-256); with
/// `--show-attachments SQL` (a query of a label and a SHA-256) it shows each attachment the rows name, from its local
/// file (`ferry.attachments.url(for:)`, which downloads an on-demand one first). It stops after `--seconds` or when
/// the file named by `--stop-file` appears. With `--subscribe KEY` (repeatable) it subscribes to those partitions of
/// a partitioned dataset (FerryGRDB's `ferry.subscribe(_:)`) before its first sync: the device then carries the shared
/// tables and only those projects.
///
///     field-notes --dir device --server http://127.0.0.1:8080 --dataset trips \
///         --watch "SELECT name || ': ' || passengers FROM trips ORDER BY name" \
///         --edit "UPDATE trips SET bags = bags + 1 WHERE name = 'Växjö-Kalmar'" --edit-every 3 --sync-every 1
@main
struct FieldNotes {
    struct Options {
        var directory = "field-notes"
        var server = "http://127.0.0.1:8080"
        var dataset = "trips"
        var watch = "SELECT name || ': ' || passengers FROM trips ORDER BY name"
        var edit: String?
        var editEvery = 5.0
        var syncEvery = 1.0
        var seconds = 60.0
        var stopFile: String?
        var resolve = "show"
        var attach: String?
        var attachEdit: String?
        var showAttachments: String?
        var subscribe: [String] = []

        init(_ arguments: [String]) throws {
            var iterator = arguments.makeIterator()
            while let flag = iterator.next() {
                guard let value = iterator.next() else {
                    throw FerryError(.badInput, "\(flag) needs a value", key: flag)
                }
                switch flag {
                case "--dir": directory = value
                case "--server": server = value
                case "--dataset": dataset = value
                case "--watch": watch = value
                case "--edit": edit = value
                case "--edit-every": editEvery = try Self.seconds(value, flag)
                case "--sync-every": syncEvery = try Self.seconds(value, flag)
                case "--seconds": seconds = try Self.seconds(value, flag)
                case "--stop-file": stopFile = value
                case "--attach": attach = value
                case "--attach-edit": attachEdit = value
                case "--show-attachments": showAttachments = value
                case "--subscribe": subscribe.append(value)
                case "--resolve":
                    guard ["show", "resubmit", "discard"].contains(value) else {
                        throw FerryError(
                            .badInput, "--resolve takes show, resubmit or discard, not '\(value)'", key: flag)
                    }
                    resolve = value
                default:
                    throw FerryError(
                        .badInput,
                        "unknown option \(flag): use --dir, --server, --dataset, --watch, --edit, --edit-every, --sync-every, --seconds, --stop-file, --resolve, --attach, --attach-edit, --show-attachments, --subscribe",
                        key: flag)
                }
            }
        }

        static func seconds(_ text: String, _ flag: String) throws -> Double {
            guard let value = Double(text), value > 0 else {
                throw FerryError(.badInput, "\(flag) takes seconds > 0, not '\(text)'", key: flag)
            }
            return value
        }
    }

    static func main() async {
        do {
            try await run(try Options(Array(CommandLine.arguments.dropFirst())))
        } catch {
            print("field-notes: \(error)")
            exit(1)
        }
    }

    static func run(_ options: Options) async throws {
        guard let server = URL(string: options.server) else {
            throw FerryError(.badInput, "--server '\(options.server)' is not a URL", key: "--server")
        }
        var logger = Logger(label: "field-notes")
        logger.logLevel = .warning
        let configuration = FerryClient.Configuration(
            directory: URL(fileURLWithPath: options.directory), serverURL: server, dataset: options.dataset)
        let ferry = try await FerryDatabase.open(configuration: configuration, applyMode: .automatic, logger: logger)
        say("opened \(options.directory) (\(ferry.currentStatus.state.rawValue))")
        if !options.subscribe.isEmpty {
            // A partitioned dataset: the device carries the shared tables and the projects it subscribes to.
            try await ferry.subscribe(options.subscribe)
            let keys = await ferry.subscriptions
            say("subscribed to \(keys.joined(separator: ", "))")
        }

        try await withThrowingTaskGroup(of: Void.self) { group in
            // The screen: a query observed with plain GRDB. It fires on the app's writes and on Ferry's updates.
            let watch = options.watch
            group.addTask {
                // Before the initial sync the database has no table to track, so the observation tracks the whole
                // database: Ferry tells GRDB about every table it fills or changes.
                let observation = ValueObservation.tracking(region: DatabaseRegion.fullDatabase) { db -> [String] in
                    guard try db.tableExists("ferry_snapshot") else { return [] }
                    return try String.fetchAll(db, sql: watch)
                }.removeDuplicates()
                for try await rows in observation.values(in: ferry.pool) where !rows.isEmpty {
                    say("observed: \(rows.joined(separator: " | "))")
                }
            }
            // Sync status, as a status bar would show it.
            group.addTask {
                var shown = ""
                for await status in ferry.statusUpdates() {
                    var line =
                        "status: \(status.state.rawValue) v\(status.version.map(String.init) ?? "-") queued=\(status.queuedEdits)"
                    if status.rejectedEdits > 0 { line += " rejected=\(status.rejectedEdits)" }
                    if let download = status.download {
                        line += " downloading \(download.bytesReceived) B\(download.isPatch ? " (patch)" : "")"
                    }
                    if status.pendingAttachments > 0 {
                        line += " photos to upload=\(status.pendingAttachments) (\(status.pendingAttachmentBytes) B)"
                    }
                    if status.attachmentDownloads > 0 { line += " photo downloads=\(status.attachmentDownloads)" }
                    if let error = status.lastError { line += " error=\(error.code)" }
                    // Each check changes the status's time of the last check; the line shows only what a person reads.
                    if line != shown { say(line) }
                    shown = line
                }
            }
            // The user's edit, on a timer, through the same pool.
            if let edit = options.edit {
                let every = options.editEvery
                group.addTask {
                    while !Task.isCancelled {
                        try await Task.sleep(for: .seconds(every))
                        guard ferry.currentStatus.version != nil else { continue }
                        let changed = try await ferry.pool.write { db -> Int in
                            try db.execute(sql: edit)
                            return db.changesCount
                        }
                        say("wrote an edit (\(changed) row\(changed == 1 ? "" : "s"))")
                        try await ferry.refreshStatus()
                    }
                }
            }
            if let file = options.attach, let sql = options.attachEdit {
                group.addTask { try await attachPhoto(ferry, file: file, sql: sql) }
            }
            if let query = options.showAttachments {
                group.addTask { try await showAttachments(ferry, query: query) }
            }
            // Sync: push the edits, fetch, apply in place. Offline is normal: the status shows it.
            let syncEvery = options.syncEvery
            let resolve = options.resolve
            group.addTask {
                var shown: Set<String> = []
                while !Task.isCancelled {
                    do {
                        _ = try await ferry.sync()
                        try await resolveRejected(ferry, resolve: resolve, shown: &shown)
                    } catch let error as FerryError {
                        // Shown in the status line (offline is normal); the next round tries again.
                        if error.code != .offline { say("sync failed: \(error)") }
                    }
                    try await Task.sleep(for: .seconds(syncEvery))
                }
            }
            // The end: a duration, or a stop file the demo creates.
            let deadline = ContinuousClock.now + .seconds(options.seconds)
            let stopFile = options.stopFile
            group.addTask {
                while ContinuousClock.now < deadline {
                    if let stopFile, FileManager.default.fileExists(atPath: stopFile) { break }
                    try await Task.sleep(for: .milliseconds(100))
                }
            }
            try await group.next()
            group.cancelAll()
        }
        try await ferry.close()
        say("closed")
    }

    /// The user takes a photo: once the first version is here, the file is attached (copied durably and queued for
    /// upload) and the row that names it written, in one write through the pool. The next sync uploads the photo,
    /// then the edit.
    static func attachPhoto(_ ferry: FerryDatabase, file: String, sql: String) async throws {
        while ferry.currentStatus.version == nil { try await Task.sleep(for: .milliseconds(100)) }
        let sha = try await ferry.attachments.add(fileAt: URL(fileURLWithPath: file))
        try await ferry.pool.write { db in try db.execute(sql: sql, arguments: [sha]) }
        say("attached \((file as NSString).lastPathComponent) as \(sha)")
        try await ferry.refreshStatus()
        // The app goes on (its other tasks end it): this task's end would stop the group.
        while !Task.isCancelled { try await Task.sleep(for: .seconds(3600)) }
    }

    /// The screen that shows photos: every attachment the query's rows name (label, SHA-256), from its local file,
    /// once each. A photo not downloaded yet is shown when a later update brings it.
    static func showAttachments(_ ferry: FerryDatabase, query: String) async throws {
        var shown: Set<String> = []
        let observation = ValueObservation.tracking(region: DatabaseRegion.fullDatabase) { db -> [[String]] in
            guard try db.tableExists("ferry_snapshot") else { return [] }
            return try Row.fetchAll(db, sql: query).map { row in [row[0] as String? ?? "", row[1] as String? ?? ""] }
        }.removeDuplicates()
        for try await rows in observation.values(in: ferry.pool) {
            for row in rows where Attachment.isID(row[1]) && !shown.contains(row[1]) {
                do {
                    let url = try await ferry.attachments.url(for: row[1])
                    let size = (try FileManager.default.attributesOfItem(atPath: url.path)[.size] as? NSNumber) ?? 0
                    say("photo: \(row[0]): \(size) bytes at \(url.path)")
                    shown.insert(row[1])
                } catch let error as FerryError {
                    say("photo: \(row[0]): not here yet (\(error.code))")
                }
            }
        }
    }

    /// Shows each edit the server did not take (once), as a conflict sheet would: the columns that lost, with the
    /// user's and the server's values. Then, per `resolve`: `resubmit` sends the lost values again on top of the
    /// server's row (a new queued edit, pushed by the next sync), `discard` keeps the server's row, `show` leaves it.
    static func resolveRejected(_ ferry: FerryDatabase, resolve: String, shown: inout Set<String>) async throws {
        for edit in try await ferry.rejectedEdits() {
            if shown.insert(edit.id).inserted {
                let columns = edit.lostColumns.map { column in
                    "\(column): yours \(text(edit.values[column])), server \(text(edit.serverValues?[column]))"
                }
                say("\(edit.outcome.rawValue) edit of \(edit.table): \(columns.joined(separator: "; "))")
            }
            switch resolve {
            case "resubmit" where edit.outcome != .gone:
                let mine = edit.values.filter { edit.lostColumns.contains($0.key) }
                let change = try await ferry.resubmit(edit, values: mine)
                say("resubmitted \(edit.id) as \(change)")
            case "discard", "resubmit":
                try await ferry.discard(edit)
                say("discarded \(edit.id): the server's row stays")
            default:
                break
            }
        }
    }

    static func text(_ value: JSONValue?) -> String {
        switch value {
        case .string(let s): return "'\(s)'"
        case .int(let i): return String(i)
        case .double(let d): return String(d)
        case .bool(let b): return String(b)
        case .null: return "null"
        case nil: return "-"
        }
    }

    /// One line to standard output, written at once (the demo reads it through a pipe).
    static func say(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }
}
