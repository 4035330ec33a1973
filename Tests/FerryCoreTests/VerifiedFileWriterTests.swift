import FerryCore
import FerryTestSupport
import Foundation
import Testing

/// The one writer of verified files: hashed as written in hops off the caller's task, renamed only on a match, a kept
/// prefix continued and hashed whole.
@Suite struct VerifiedFileWriterTests {
    /// A lane that counts its hops and runs them on a thread of their own.
    final class CountingLane: Sendable {
        let hops = Locked(0)
        var lane: BlockingLane {
            { [hops] work in
                hops.withLock { $0 += 1 }
                try await offCooperativePool(work)
            }
        }
    }

    static let bytes = Data((0..<(3 << 20) + 12_345).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 11) })

    @Test func aMatchIsRenamedIntoPlaceAfterHopsOfAMebibyte() async throws {
        let dir = try TemporaryDirectory("ferry-verified")
        defer { dir.remove() }
        let counting = CountingLane()
        // Given a stream of 64 KiB chunks
        let writer = try await VerifiedFileWriter.open(dir.appending("tmp"), .new, lane: counting.lane)
        for start in stride(from: 0, to: Self.bytes.count, by: 64 << 10) {
            try await writer.append(Self.bytes[start..<min(start + (64 << 10), Self.bytes.count)])
        }
        // When it finishes with the SHA-256 and size promised
        let sha256 = FileDigest.sha256Hex(bytes: Array(Self.bytes))
        let written = try await writer.finish(expecting: .init(sha256: sha256, size: Int64(Self.bytes.count)))
        try await writer.commit(to: dir.appending("final"))

        // Then the file holds the bytes under its final name, and the writes took one hop per MiB, not per chunk
        #expect(written.sha256 == sha256 && written.size == Int64(Self.bytes.count))
        #expect(try Data(contentsOf: dir.appending("final")) == Self.bytes)
        #expect(!FileManager.default.fileExists(atPath: dir.appending("tmp").path))
        #expect(counting.hops.current <= 4 + 4)  // open, 4 hops of writes, fsync, close and hash, rename
    }

    @Test func aMismatchThrowsVerificationAndIsNeverRenamed() async throws {
        let dir = try TemporaryDirectory("ferry-verified")
        defer { dir.remove() }
        let writer = try await VerifiedFileWriter.open(dir.appending("tmp"), .new, lane: CountingLane().lane)
        try await writer.append(Data("not the promised bytes".utf8))
        let error = await #expect(throws: FerryError.self) {
            try await writer.finish(expecting: .init(sha256: String(repeating: "0", count: 64)))
        }
        #expect(error?.code == .verification && error?.path == dir.appending("tmp").path)
        await writer.discard()
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.url.path).isEmpty)
    }

    @Test func aKeptPrefixIsContinuedAndTheWholeFileHashed() async throws {
        let dir = try TemporaryDirectory("ferry-verified")
        defer { dir.remove() }
        let file = dir.appending("partial")
        // Given the first million bytes kept from a broken transfer
        try Self.bytes.prefix(1_000_000).write(to: file)
        // When the rest arrives on a writer opened on the kept prefix
        let writer = try await VerifiedFileWriter.open(file, .keptPrefix, lane: CountingLane().lane)
        #expect(writer.size == 1_000_000)
        try await writer.append(Self.bytes.dropFirst(1_000_000))
        // Then the whole file's SHA-256 is checked, the prefix's bytes included
        let written = try await writer.finish(
            expecting: .init(sha256: FileDigest.sha256Hex(bytes: Array(Self.bytes)), size: Int64(Self.bytes.count)))
        #expect(written.size == Int64(Self.bytes.count))
        #expect(try Data(contentsOf: file) == Self.bytes)
    }
}

/// The blocking core, as the snapshot download drives it: continued at a kept prefix with whatever a crash left after
/// it cut, hashed on one thread while written on another.
@Suite struct VerifiedFileTests {
    func write(_ bytes: [UInt8], to url: URL, keeping kept: Int64) throws -> VerifiedFile.Written {
        let file = try VerifiedFile(url, .keeping(kept), bufferSize: 4096)
        try file.hashKept()
        try bytes.withUnsafeBytes { try file.append($0) }
        return try file.finish()
    }

    @Test func continuesAtTheKeptPrefixAndCutsWhatFollowsIt() throws {
        let temp = try TemporaryDirectory("ferry-verified-file")
        defer { temp.remove() }
        let url = temp.appending("partial.sqlite")
        func expect(_ written: VerifiedFile.Written, _ bytes: [UInt8]) throws {
            #expect(try Data(contentsOf: url) == Data(bytes))
            #expect(written.sha256 == FileDigest.sha256Hex(bytes: bytes) && written.size == Int64(bytes.count))
        }

        // A fresh download: the file is created, and holds exactly what was written.
        try expect(write(Array(0..<100), to: url, keeping: 0), Array(0..<100))
        // A resume at the file's end keeps every byte before it, and hashes them.
        try expect(write([200, 201], to: url, keeping: 100), Array(0..<100) + [200, 201])
        // A resume before the end (a crash left bytes the record does not vouch for): they are cut.
        try expect(write([7, 7, 7], to: url, keeping: 40), Array(0..<40) + [7, 7, 7])
        // Starting over at 0 on a file that holds bytes: nothing of them is left.
        try expect(write([1], to: url, keeping: 0), [1])
        // A record that vouches for more bytes than the file holds is refused, naming the file.
        let error = #expect(throws: FerryError.self) { try VerifiedFile(url, .keeping(2)) }
        #expect(error?.path == url.path && error?.message.contains("fewer than the 2 kept") == true)
        #expect(try Data(contentsOf: url) == Data([1]))
    }

    @Test func writesAfterACutGoRightAfterIt() throws {
        let temp = try TemporaryDirectory("ferry-verified-file")
        defer { temp.remove() }
        for start in [VerifiedFile.Start.new, .keeping(0)] {
            let url = temp.appending("cut")
            try? FileManager.default.removeItem(at: url)  // absent on the first round
            let file = try VerifiedFile(url, start, bufferSize: 4096)
            try Data([1, 2, 3, 4, 5]).withUnsafeBytes { try file.append($0) }
            try file.truncate(to: 2)
            try Data([9]).withUnsafeBytes { try file.append($0) }
            let written = try file.finish()
            #expect(try Data(contentsOf: url) == Data([1, 2, 9]), "\(start)")
            #expect(written.sha256 == FileDigest.sha256Hex(bytes: [1, 2, 9]) && written.size == 3)
        }
    }

    @Test func hashedOnOneThreadWhileWrittenOnAnother() async throws {
        let temp = try TemporaryDirectory("ferry-verified-file")
        defer { temp.remove() }
        let file = try VerifiedFile(temp.appending("f"), .new, bufferSize: 1 << 16)
        let bytes = VerifiedFileWriterTests.bytes
        // Pieces of uneven sizes: some are gathered in the write buffer, some go straight to the file.
        var pieces: [Data] = []
        var start = 0
        let sizes = [1_000, 20_000, 70_000, 5, 300_000]
        while start < bytes.count {
            let size = sizes[pieces.count % sizes.count]
            pieces.append(bytes[start..<min(start + size, bytes.count)])
            start += size
        }
        let fed = pieces
        async let hashed: Void = try offCooperativePool {
            for piece in fed { piece.withUnsafeBytes { file.hash($0) } }
        }
        async let wrote: Void = try offCooperativePool {
            for piece in fed { try piece.withUnsafeBytes { try file.write($0) } }
        }
        try await hashed
        try await wrote
        let written = try file.finish()
        #expect(try Data(contentsOf: temp.appending("f")) == Data(pieces.joined()))
        #expect(written.sha256 == FileDigest.sha256Hex(bytes: Array(pieces.joined())))
    }
}
