import FerryCore
import Foundation

/// The attachments a scope's retained versions name: what a token of that scope may read, and what retention must
/// keep. The names in each retained checkpoint's file (`SELECT column FROM table WHERE column IS NOT NULL` for each
/// column its `ferry_attachments` lists), plus the new values each later retained step writes into such a column
/// (read from the step's changeset, columns by their position in `ferry_tables.columns`). A value a step
/// overwrites stays named: a device may still hold the version before the step.
///
/// Blocking (SQLite, reading steps): call it off the cooperative pool. The server caches the answer per scope and
/// manifest revision.
///
/// ```swift
/// let names = try AttachmentNames.of(entry, in: manifest, store: store)
/// names.contains(sha256)
/// ```
public enum AttachmentNames {
    /// The names `entry`'s retained versions hold. Throws when a checkpoint or a step cannot be read, or when the
    /// oldest retained version is not a checkpoint (then nobody can tell, and retention must delete nothing).
    public static func of(_ entry: ScopeEntry, in manifest: StoredManifest, store: any SnapshotStore) throws
        -> Set<String>
    {
        var names: Set<String> = []
        // Per table, the positions of its attachment columns, from the checkpoint the steps after it apply to.
        var positions: [String: [Int32]]?
        let steps = VersionBuilder(store: store, cache: FileManager.default.temporaryDirectory)
        for record in entry.retained {
            if record.isCheckpoint {
                let file = store.files(of: record, in: manifest).snapshot
                let (held, columns) = try checkpoint(file)
                names.formUnion(held)
                positions = columns
            } else if let step = record.step {
                guard let positions else {
                    throw FerryError(
                        .store,
                        "version \(record.version) is stored as a step, but no checkpoint is retained before it",
                        path: store.manifestURL(dataset: manifest.dataset).path)
                }
                if positions.isEmpty { continue }
                names.formUnion(try steps.loadStep(step, dataset: manifest.dataset).newTextValues(in: positions))
            }
        }
        return names.filter(Attachment.isID)
    }

    /// The names a snapshot file holds, and the positions of its attachment columns per table.
    public static func checkpoint(_ file: URL) throws -> (names: Set<String>, positions: [String: [Int32]]) {
        let db = try SQLiteConnection(path: file.path, mode: .readOnly)
        let columns = try SnapshotMetadata.readAttachments(from: db)
        guard !columns.isEmpty else { return ([], [:]) }
        let tables = Dictionary(
            uniqueKeysWithValues: try SnapshotMetadata.read(from: db).tables.map { ($0.name, $0.columns) })
        var positions: [String: [Int32]] = [:]
        for column in columns {
            guard let index = tables[column.table]?.firstIndex(of: column.column) else {
                throw FerryError(
                    .verification,
                    "ferry_attachments names \(column.table).\(column.column), which ferry_tables does not list",
                    path: file.path)
            }
            positions[column.table, default: []].append(Int32(index))
        }
        let names = Set(try SnapshotMetadata.attachmentNames(in: db, columns: columns).keys)
        return (names, positions)
    }
}
