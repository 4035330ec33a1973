import FerryClient
import FerryCore
import Foundation
import Logging

extension FerryDatabase {
    /// The app's attachments: photos, scans, signatures that rows name by their SHA-256.
    ///
    /// ```swift
    /// let sha = try await ferry.attachments.add(data: jpeg, contentType: "image/jpeg")
    /// try await ferry.pool.write { db in try db.execute(sql: "UPDATE notes SET photo = ? WHERE id = ?", arguments: [sha, id]) }
    /// let url = try await ferry.attachments.url(for: sha)
    /// ```
    public var attachments: Attachments { Attachments(database: self) }

    /// Adds attachments (copied durably into the client directory and queued for upload) and finds their files
    /// (downloading an on-demand one first). The next ``FerryDatabase/push()`` uploads the queued ones, resumably,
    /// before any edit that names them. Every call is `async`: the copy, its hash and fsync, and every upload or
    /// download run on the client's blocking lane, never on the caller's thread.
    ///
    /// ```swift
    /// let sha = try await ferry.attachments.add(fileAt: photoURL, contentType: "image/heic")
    /// ```
    public struct Attachments: Sendable {
        let database: FerryDatabase

        /// Stores `data` as an attachment, queues it for upload, and returns its SHA-256: the value the row's
        /// attachment column holds. The same bytes twice are stored and uploaded once.
        ///
        /// ```swift
        /// let sha = try await ferry.attachments.add(data: jpeg, contentType: "image/jpeg")
        /// ```
        public func add(data: Data, contentType: String = "application/octet-stream") async throws -> String {
            let added = try await database.client.deviceAttachments.add(data: data, contentType: contentType)
            database.queued(added)
            return added.sha256
        }

        /// Copies the file at `url` (hashing it as it goes) and queues it for upload; returns its SHA-256. A missing
        /// or unreadable file throws `FerryError.Code.io` naming the path, and nothing is queued. The content type
        /// defaults to one from the file's extension.
        ///
        /// ```swift
        /// let sha = try await ferry.attachments.add(fileAt: photoURL, contentType: "image/heic")
        /// ```
        public func add(fileAt url: URL, contentType: String? = nil) async throws -> String {
            let added = try await database.client.deviceAttachments.add(fileAt: url, contentType: contentType)
            database.queued(added)
            return added.sha256
        }

        /// The local file of attachment `sha256`, downloaded and verified first when the device lacks it (an
        /// on-demand attachment); ``SyncStatus/attachmentDownloads`` counts it meanwhile. Throws
        /// `FerryError.Code.notFound` when the server does not hold it.
        ///
        /// ```swift
        /// let image = UIImage(contentsOfFile: try await ferry.attachments.url(for: note.photo).path)
        /// ```
        public func url(for sha256: String) async throws -> URL {
            let client = database.client
            if client.deviceAttachments.contains(sha256) { return try await client.attachmentURL(for: sha256) }
            database.broadcast.update { $0.attachmentDownloads += 1 }
            defer { database.broadcast.update { $0.attachmentDownloads -= 1 } }
            return try await client.attachmentURL(for: sha256)
        }
    }

    /// Counts an attachment just queued in the status.
    func queued(_ added: DeviceAttachments.Added) {
        guard added.queued else { return }
        broadcast.update {
            $0.pendingAttachments += 1
            $0.pendingAttachmentBytes += added.size
        }
    }

    /// Downloads the eager attachments the live version names (``FerryClient/syncAttachments()``), counted in the
    /// status meanwhile. Never fails the update: an error goes into `lastError` and the next update tries again.
    func syncAttachments() async {
        broadcast.update { $0.attachmentDownloads += 1 }
        defer { broadcast.update { $0.attachmentDownloads -= 1 } }
        do {
            _ = try await client.syncAttachments()
        } catch {
            logger.notice(
                "attachments not brought in line; the next update tries again", metadata: ["error": "\(error)"])
            broadcast.update { $0.lastError = error as? FerryError ?? FerryError(.io, "\(error)", underlying: error) }
        }
    }
}
