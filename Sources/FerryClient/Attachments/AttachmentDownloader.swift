import FerryCore
import Foundation
import Logging

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Downloads attachments with `GET …/attachments/{sha256}` over the client's ``SnapshotTransport``: the body is
/// hashed as it is written to a temp file, fsynced, and renamed under its name only when its SHA-256 matches.
struct AttachmentDownloader: Sendable {
    let store: DeviceAttachments
    let transport: any SnapshotTransport
    /// `SERVER/v1/datasets/DATASET/attachments`.
    let base: URL
    let commonHeaders: @Sendable () async throws -> [String: String]

    /// Downloads `sha256` unless the device holds it; returns the bytes received (0 when it was there).
    /// Throws `.notFound` when the server does not hold it, `.verification` when the bytes do not match.
    func download(_ sha256: String) async throws -> Int64 {
        try DeviceAttachments.requireID(sha256)
        if store.contains(sha256) { return 0 }
        try await BlockingWork.run { [store] in try store.makeDirectories() }
        let url = base.appendingPathComponent(sha256)
        let request = SnapshotRequest(url: url, headers: try await commonHeaders())
        let temp = store.temporaryURL()
        do {
            let (digest, size) = try await transport.get(request) { head, body in
                switch head.status {
                case 200: break
                case 404:
                    throw FerryError(.notFound, "the server does not hold the attachment", key: sha256)
                case 401, 403: throw BearerAuthorization.refusal(status: head.status, url: url.absoluteString)
                default:
                    throw FerryError(
                        .network, "the server failed the attachment's download (\(head.status))", key: sha256)
                }
                return try await Self.write(body, to: temp)
            }
            guard digest == sha256 else {
                throw FerryError(
                    .verification, "the downloaded attachment's SHA-256 is \(digest), not its name; it is not kept",
                    key: sha256)
            }
            try await BlockingWork.run { [store] in
                try DurableFile.rename(temp, to: store.url(for: sha256))
            }
            return size
        } catch {
            unlink(temp.path)
            throw error
        }
    }

    /// Writes `body` to `temp` (created new), hashing it; fsyncs. Writes run off the cooperative threads.
    private static func write(_ body: SnapshotResponseBody, to temp: URL) async throws -> (String, Int64) {
        let output = try await BlockingWork.run { try Self.create(temp) }
        defer { close(output) }
        var digest = StreamingSHA256()
        var size: Int64 = 0
        var pending = Data()
        for try await chunk in body {
            pending.append(chunk)
            if pending.count >= 1 << 20 {
                let data = pending
                pending = Data()
                digest = try await BlockingWork.run { [digest] in try Self.append(data, to: output, temp, digest) }
                size += Int64(data.count)
            }
        }
        let data = pending
        digest = try await BlockingWork.run { [digest] in
            let digest = try Self.append(data, to: output, temp, digest)
            guard fsync(output) == 0 else { throw DurableFile.posixError("cannot fsync", temp.path) }
            return digest
        }
        size += Int64(data.count)
        return (digest.finalizeHex(), size)
    }

    private static func create(_ temp: URL) throws -> Int32 {
        let fd = open(temp.path, O_WRONLY | O_CREAT | O_EXCL, 0o644)
        guard fd >= 0 else { throw DurableFile.posixError("cannot create", temp.path) }
        return fd
    }

    private static func append(_ data: Data, to fd: Int32, _ temp: URL, _ digest: StreamingSHA256) throws
        -> StreamingSHA256
    {
        var digest = digest
        try data.withUnsafeBytes { bytes in
            digest.update(bytes)
            try DeviceAttachments.writeAll(fd, bytes, path: temp.path)
        }
        return digest
    }
}

/// The attachments a database's rows name, per its `ferry_attachments` table.
enum AttachmentNames {
    /// Every SHA-256 an attachment column holds, with its download mode (eager when any eager column names it).
    static func read(from db: SQLiteConnection) throws -> [String: Attachment.Download] {
        var named: [String: Attachment.Download] = [:]
        for column in try SnapshotMetadata.readAttachments(from: db) {
            let sql =
                "SELECT DISTINCT \(SQLIdentifier.quoteSQLite(column.column)) FROM \(SQLIdentifier.quoteSQLite(column.table)) WHERE \(SQLIdentifier.quoteSQLite(column.column)) IS NOT NULL"
            for row in try db.query(sql) {
                guard let sha256 = row.first?.text, Attachment.isID(sha256) else { continue }
                if named[sha256] != .eager { named[sha256] = column.download }
            }
        }
        return named
    }
}
