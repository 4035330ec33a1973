import FerryCore
import FerryStore
import FerryTestSupport
import Foundation
import Testing

@testable import FerryPublisher

/// The publisher's gzip copy, deflated by ISA-L's igzip in parallel chunks: one gzip member that zlib (Ferry's
/// inflater) and the system's `gzip` read back to the exact input, at every level, whatever the size against the
/// chunk size, and when igzip runs out of output room mid-chunk.
@Suite struct IgzipTests {
    static let chunk = 64 << 10

    /// `gzip -t` and `gzip -dc` (Debian's gzip) on the file, and Ferry's own inflater (zlib), which throws when bytes
    /// follow the first member: both must give back `original`.
    func expectInflates(_ gzip: URL, to original: Data, in temp: TemporaryDirectory) async throws {
        let test = try await runProcess(URL(fileURLWithPath: "/usr/bin/env"), ["gzip", "-t", gzip.path])
        #expect(test.status == 0, "gzip -t: \(test.stderr)")
        let out = temp.appending("system-out")
        let run = try await runProcess(
            URL(fileURLWithPath: "/bin/sh"), ["-c", "gzip -dc \"$0\" > \"$1\"", gzip.path, out.path])
        #expect(run.status == 0, "gzip -dc: \(run.stderr)")
        #expect(try Data(contentsOf: out) == original)
        let inflater = try GzipInflater(outputChunkSize: 256 << 10)
        var inflated = Data()
        try inflater.inflate(try Data(contentsOf: gzip)) { inflated.append(contentsOf: $0) }
        try inflater.finish()
        #expect(inflated == original)
    }

    @Test(arguments: [0, 1, 2, 3], [0, 1, chunk - 1, chunk, chunk + 1, 5 * chunk + 1234, 5 * chunk + 1235])
    func inflatesToTheExactInput(level: Int, size: Int) async throws {
        let temp = try TemporaryDirectory("ferry-igzip")
        defer { temp.remove() }
        // Every third size is random bytes (incompressible); the others compressible text.
        let original = size % 3 == 0 ? Data((0..<size).map { _ in UInt8.random(in: 0...255) }) : GzipSamples.text(size)
        let plain = temp.appending("plain")
        try original.write(to: plain)
        let gzip = temp.appending("plain.gz")
        let result = try Gzip.compressAndHashParallel(
            from: plain, to: gzip, encoding: .igzip(level: level), threads: 3, chunkSize: Self.chunk)

        let compressed = try Data(contentsOf: gzip)
        #expect(result.size == Int64(size))
        #expect(result.gzipSize == Int64(compressed.count))
        #expect(result.sha256 == (try FileDigest.sha256Hex(of: plain)))
        #expect(compressed.prefix(10) == Data([0x1F, 0x8B, 8, 0, 0, 0, 0, 0, level <= 1 ? 4 : 0, 3]))
        if size % 3 != 0 && size > Self.chunk {
            #expect(compressed.count < size * 3 / 4, "text must shrink: \(compressed.count) of \(size)")
        }
        try await expectInflates(gzip, to: original, in: temp)
    }

    /// An encoder that starts every chunk with no output room: igzip stops when the buffer is full and the encoder
    /// grows it and calls again, many times per chunk, across sync flushes and the final block.
    @Test func aChunkThatOutgrowsItsBufferIsWhole() async throws {
        let temp = try TemporaryDirectory("ferry-igzip")
        defer { temp.remove() }
        let original =
            GzipSamples.text(3 * Self.chunk + 77) + Data((0..<Self.chunk).map { _ in UInt8.random(in: 0...255) })
        let plain = temp.appending("plain")
        try original.write(to: plain)
        let gzip = temp.appending("plain.gz")
        let encoding = Gzip.ChunkEncoding(extraFlags: 0) { try IgzipChunkEncoder(level: 2, reserveBound: false) }
        _ = try Gzip.compressAndHashParallel(
            from: plain, to: gzip, encoding: encoding, threads: 2, chunkSize: Self.chunk)
        try await expectInflates(gzip, to: original, in: temp)
    }

    /// The stored gzip copy of a publish is igzip's: a real snapshot inflates to its object and is no larger than
    /// zlib's fastest level would make it, give or take 5 %.
    @Test func aPublishedGzipCopyIsIgzips() async throws {
        let temp = try TemporaryDirectory("ferry-igzip")
        defer { temp.remove() }
        let file = temp.appending("snapshot.sqlite")
        try GzipSamples.snapshot(at: file)
        let zlib = try Gzip.compressAndHash(from: file, to: temp.appending("zlib.gz"), level: 1)
        let prepared = try FileSnapshotStore.PreparedObject(file: file, encoding: .igzip(level: 2))
        #expect(prepared.sha256 == zlib.sha256 && prepared.size == zlib.size)
        #expect(
            Double(prepared.gzipSize) <= Double(zlib.gzipSize) * 1.05,
            "igzip \(prepared.gzipSize) vs zlib \(zlib.gzipSize)")
        try await expectInflates(prepared.gzipFile, to: try Data(contentsOf: file), in: temp)
    }
}
