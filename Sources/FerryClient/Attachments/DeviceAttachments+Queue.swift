import FerryCore
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// An attachment waiting for upload (`DIR/.ferry/attachments/queue/<sha256>.json`).
///
/// ```swift
/// let pending = try DeviceAttachments(directory: dir).queued()
/// print(pending.map(\.size).reduce(0, +), "bytes to upload")
/// ```
public struct QueuedAttachment: Sendable, Equatable, Codable {
    /// The SHA-256 of the bytes.
    public var sha256: String
    /// Bytes.
    public var size: Int64
    /// Sent as the upload's content type.
    public var contentType: String
    /// When it was added (`2026-05-01T12:00:00.000Z`).
    public var queuedAt: String
    /// The tus upload the server made for it, once it made one: where an interrupted upload resumes.
    public var uploadURL: String?

    public init(sha256: String, size: Int64, contentType: String, queuedAt: String, uploadURL: String? = nil) {
        self.sha256 = sha256
        self.size = size
        self.contentType = contentType
        self.queuedAt = queuedAt
        self.uploadURL = uploadURL
    }
}

extension DeviceAttachments {
    /// The attachments waiting for upload, oldest first. An entry whose file is gone (a crash inside an add) or
    /// that cannot be read is skipped (and reported through `skipped`).
    ///
    /// ```swift
    /// for entry in try store.queued() { print(entry.sha256, entry.size) }
    /// ```
    public func queued(skipped: (String) -> Void = { _ in }) throws -> [QueuedAttachment] {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: queueDirectory.path)
        } catch CocoaError.fileReadNoSuchFile {
            return []
        } catch {
            guard FileManager.default.fileExists(atPath: queueDirectory.path) else { return [] }
            throw FerryError(
                .io, "cannot list the attachments' upload queue: \(error.localizedDescription)",
                path: queueDirectory.path)
        }
        var entries: [QueuedAttachment] = []
        for name in names where name.hasSuffix(".json") && !name.hasPrefix(".") {
            let file = queueDirectory.appendingPathComponent(name)
            // An entry that does not decode is reported and left alone: its file, if any, stays on the device.
            guard let data = FileManager.default.contents(atPath: file.path),
                let entry = try? JSONDecoder().decode(QueuedAttachment.self, from: data),  // reported below
                Attachment.isID(entry.sha256), name == "\(entry.sha256).json"
            else {
                skipped("an unreadable upload queue entry is ignored: \(file.path)")
                continue
            }
            entries.append(entry)
        }
        return entries.sorted { ($0.queuedAt, $0.sha256) < ($1.queuedAt, $1.sha256) }
    }

    /// The SHA-256s waiting for upload.
    func queuedIDs() throws -> Set<String> { Set(try queued().map(\.sha256)) }

    /// Writes `entry` durably (temp, fsync, rename, the directory fsynced).
    func save(_ entry: QueuedAttachment) throws { try write(entry, syncingDirectory: true) }

    /// Rewrites the entry of an attachment already queued (its upload's URL learned or forgotten): temp, fsync,
    /// rename, without the directory's fsync. A power loss may undo the rename and leave the entry as it was, which
    /// is as good: without the URL the next push starts the upload again with `POST` (the server sweeps the forgotten
    /// one within a day), and with a forgotten one it asks and gets 404.
    func update(_ entry: QueuedAttachment) throws { try write(entry, syncingDirectory: false) }

    private func write(_ entry: QueuedAttachment, syncingDirectory: Bool) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        try DurableFile.write(
            try encoder.encode(entry), to: queueURL(for: entry.sha256), syncingDirectory: syncingDirectory)
    }

    /// Takes `sha256` off the queue: only once the server holds it. The directory is not fsynced: an entry a power
    /// loss brings back is harmless, as the next push's `HEAD` finds the attachment held and takes it off again
    /// without sending a byte (one fsync less per photo on the push's path).
    func dequeue(_ sha256: String) throws {
        let file = queueURL(for: sha256)
        guard unlinkIfPresent(file) else { throw DurableFile.posixError("cannot remove", file.path) }
    }

    /// Removes `file`; true when it is gone (also when it was never there).
    func unlinkIfPresent(_ file: URL) -> Bool {
        unlink(file.path) == 0 || errno == ENOENT
    }
}

extension DeviceAttachments {
    /// The queue entry of `sha256`, nil when it is not queued.
    func entry(_ sha256: String) throws -> QueuedAttachment? {
        let file = queueURL(for: sha256)
        guard let data = FileManager.default.contents(atPath: file.path) else { return nil }
        do {
            return try JSONDecoder().decode(QueuedAttachment.self, from: data)
        } catch {
            throw FerryError(.verification, "an upload queue entry is malformed: \(error)", path: file.path)
        }
    }
}
