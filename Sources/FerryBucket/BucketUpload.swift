import FerryCore
import FerryS3
import FerryStore
import Foundation

/// Uploads of local files into the bucket. The reads block: they run on the publish lane (`ThreadJob.run`, see
/// ``BucketPublisher/lane``), never on the cooperative pool.
enum BucketUpload {
    static func size(of file: URL) throws -> Int64 {
        do {
            let attributes = try FileManager.default.attributesOfItem(atPath: file.path)
            return (attributes[.size] as? NSNumber)?.int64Value ?? 0
        } catch {
            throw FerryError(
                .io, "cannot read the size of a file to upload: \(error.localizedDescription)", path: file.path)
        }
    }

    /// Uploads `file` as a multipart upload: parts of `partSize` bytes read from the file, each with its SHA-256,
    /// at most `inFlight` at once (so memory holds at most that many parts). Any failure aborts the upload and
    /// throws.
    static func multipart(
        s3: S3Client, bucket: String, key: String, file: URL, size: Int64, partSize: Int, inFlight: Int
    ) async throws {
        let partCount = Int((size + Int64(partSize) - 1) / Int64(partSize))
        let uploadID = try await s3.createMultipartUpload(bucket: bucket, key: key)
        do {
            let parts = try await withThrowingTaskGroup(of: S3UploadedPart.self) { group in
                var parts: [S3UploadedPart] = []
                var next = 1
                func start() {
                    let number = next
                    next += 1
                    group.addTask {
                        let body = try await ThreadJob.run(name: BucketPublisher.lane) {
                            try readPart(of: file, offset: Int64(number - 1) * Int64(partSize), length: partSize)
                        }
                        return try await s3.uploadPart(
                            bucket: bucket, key: key, uploadID: uploadID, partNumber: number, body: body)
                    }
                }
                while next <= min(partCount, max(1, inFlight)) { start() }
                while let part = try await group.next() {
                    parts.append(part)
                    if next <= partCount { start() }
                }
                return parts
            }
            try await s3.completeMultipartUpload(bucket: bucket, key: key, uploadID: uploadID, parts: parts)
        } catch {
            // The parts are garbage now; a failure here leaves the upload to the next publish's clean-up.
            try? await s3.abortMultipartUpload(bucket: bucket, key: key, uploadID: uploadID)
            throw error
        }
    }

    /// The whole of `file` (a small object, at most ``BucketPublisher/multipartThreshold`` bytes). Blocking.
    static func read(_ file: URL) throws -> Data {
        do {
            return try Data(contentsOf: file)
        } catch {
            throw FerryError(.io, "cannot read a file to upload: \(error.localizedDescription)", path: file.path)
        }
    }

    /// `length` bytes of `file` from `offset` (fewer at its end). Blocking.
    static func readPart(of file: URL, offset: Int64, length: Int) throws -> Data {
        do {
            let handle = try FileHandle(forReadingFrom: file)
            defer { try? handle.close() }  // read only: a close error loses nothing
            try handle.seek(toOffset: UInt64(offset))
            return try handle.read(upToCount: length) ?? Data()
        } catch {
            throw FerryError(
                .io, "cannot read the part at \(offset) of a file to upload: \(error.localizedDescription)",
                path: file.path)
        }
    }
}
