import FerryCore
import FerryStore
import FerryTestSupport
import Foundation
import Testing

/// `Gzip.compressAndHashParallel` (what the publisher stores): one gzip member that Ferry's own inflater and the
/// system's `gzip` read back to the exact input, whatever the size against the chunk size, with the same SHA-256 a
/// plain read gives, and about the size single-threaded level 1 gives.
@Suite struct GzipParallelTests {
    static let chunk = 64 << 10

    /// The gzip file inflated by `gzip -dc` (Debian's gzip, a real component) into a file, read back.
    func systemGunzip(_ gzip: URL, in temp: TemporaryDirectory) async throws -> Data {
        let out = temp.appending("system-out")
        let run = try await runProcess(
            URL(fileURLWithPath: "/bin/sh"), ["-c", "gzip -dc \"$0\" > \"$1\"", gzip.path, out.path])
        #expect(run.status == 0, "gzip -dc: \(run.stderr)")
        return try Data(contentsOf: out)
    }

    func ferryGunzip(_ compressed: Data) throws -> Data {
        let inflater = try GzipInflater(outputChunkSize: 256 << 10)
        var out = Data()
        // GzipInflater throws when bytes follow the first member's trailer: this also proves there is one member.
        try inflater.inflate(compressed) { out.append(contentsOf: $0) }
        try inflater.finish()
        return out
    }

    @Test(arguments: [0, 1, chunk - 1, chunk, chunk + 1, 5 * chunk + 1234, 5 * chunk + 1235])
    func inflatesToTheExactInput(size: Int) async throws {
        let temp = try TemporaryDirectory("ferry-pgzip")
        defer { temp.remove() }
        // Every third size is random bytes (incompressible: stored blocks); the others compressible text.
        let original = size % 3 == 0 ? Data((0..<size).map { _ in UInt8.random(in: 0...255) }) : GzipSamples.text(size)
        let plain = temp.appending("plain")
        try original.write(to: plain)
        let gzip = temp.appending("plain.gz")
        let result = try Gzip.compressAndHashParallel(
            from: plain, to: gzip, level: 1, threads: 3, chunkSize: Self.chunk)

        let compressed = try Data(contentsOf: gzip)
        #expect(result.size == Int64(size))
        #expect(result.gzipSize == Int64(compressed.count))
        #expect(result.sha256 == (try FileDigest.sha256Hex(of: plain)))
        #expect(compressed.prefix(3) == Data([0x1F, 0x8B, 8]))
        #expect(try ferryGunzip(compressed) == original)
        #expect(try await systemGunzip(gzip, in: temp) == original)
        let test = try await runProcess(URL(fileURLWithPath: "/usr/bin/env"), ["gzip", "-t", gzip.path])
        #expect(test.status == 0, "gzip -t: \(test.stderr)")
    }

    /// A level zlib refuses is an error naming it, from every deflating thread, and nothing is left half freed.
    @Test func aLevelZlibRefusesIsAnError() throws {
        let temp = try TemporaryDirectory("ferry-pgzip")
        defer { temp.remove() }
        let plain = temp.appending("plain")
        try GzipSamples.text(3 * Self.chunk).write(to: plain)
        let error = #expect(throws: FerryError.self) {
            try Gzip.compressAndHashParallel(
                from: plain, to: temp.appending("plain.gz"), level: 42, threads: 2, chunkSize: Self.chunk)
        }
        #expect(error?.message.contains("level 42") == true, "\(String(describing: error))")
    }

    @Test func aCorruptPieceIsCaught() throws {
        let temp = try TemporaryDirectory("ferry-pgzip")
        defer { temp.remove() }
        let original = GzipSamples.text(3 * Self.chunk)
        let plain = temp.appending("plain")
        try original.write(to: plain)
        let gzip = temp.appending("plain.gz")
        _ = try Gzip.compressAndHashParallel(from: plain, to: gzip, level: 1, threads: 2, chunkSize: Self.chunk)
        // A byte changed in the second half: the CRC-32 combined over the chunks (or the deflate data) no longer
        // matches.
        var compressed = try Data(contentsOf: gzip)
        compressed[compressed.count * 2 / 3] ^= 0x5A
        #expect(throws: FerryError.self) { try ferryGunzip(compressed) }
    }

    /// A real snapshot-like SQLite file (a table of rows and an index, ~8 MB): the parallel gzip, with the
    /// publisher's chunk size, is within 3 % of single-threaded level 1.
    @Test func sizeIsCloseToSingleThreadedLevelOne() async throws {
        let temp = try TemporaryDirectory("ferry-pgzip")
        defer { temp.remove() }
        let file = temp.appending("snapshot.sqlite")
        try GzipSamples.snapshot(at: file)
        let single = try Gzip.compressAndHash(from: file, to: temp.appending("single.gz"), level: 1)
        let parallel = try Gzip.compressAndHashParallel(from: file, to: temp.appending("parallel.gz"), level: 1)
        #expect(parallel.sha256 == single.sha256 && parallel.size == single.size)
        #expect(
            Double(parallel.gzipSize) <= Double(single.gzipSize) * 1.03,
            "parallel \(parallel.gzipSize) vs single \(single.gzipSize)")
        #expect(try await systemGunzip(temp.appending("parallel.gz"), in: temp) == (try Data(contentsOf: file)))
    }
}
