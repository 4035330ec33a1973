import FerryCore
import FerryTestSupport
import Foundation
import Testing

/// The streaming inflater against files gzipped by `Gzip.compressFile` (what the publisher stores): any split of the
/// input gives the same bytes; corruption, truncation and trailing bytes are errors.
@Suite struct GzipInflaterTests {
    /// 3 MiB: compressible text with random runs in between, so the output spans many pieces.
    static func sample() -> Data {
        var generator = SystemRandomNumberGenerator()
        var data = Data()
        while data.count < 3 << 20 {
            data.append(Data("row \(data.count): Växjö-Kalmar, seats 42; ".utf8))
            if generator.next() % 4 == 0 {
                data.append(Data((0..<97).map { _ in UInt8.random(in: 0...255, using: &generator) }))
            }
        }
        return data
    }

    func gzipped(_ data: Data) throws -> Data {
        let temp = try TemporaryDirectory("ferry-gzip")
        defer { temp.remove() }
        let plain = temp.appending("plain")
        try data.write(to: plain)
        try Gzip.compressFile(from: plain, to: temp.appending("plain.gz"))
        return try Data(contentsOf: temp.appending("plain.gz"))
    }

    func inflate(_ compressed: Data, chunk: Int, outputChunkSize: Int = 256 << 10) throws -> Data {
        let inflater = try GzipInflater(outputChunkSize: outputChunkSize)
        var out = Data()
        var offset = 0
        while offset < compressed.count {
            let end = min(compressed.count, offset + chunk)
            try inflater.inflate(compressed.subdata(in: offset..<end)) { out.append(contentsOf: $0) }
            offset = end
        }
        try inflater.finish()
        #expect(inflater.bytesIn == Int64(compressed.count))
        #expect(inflater.bytesOut == Int64(out.count))
        return out
    }

    @Test func anySplitOfTheInputGivesTheSameBytes() throws {
        let original = Self.sample()
        let compressed = try gzipped(original)
        #expect(compressed.count < original.count)
        for chunk in [1 << 30, 65_536, 16_384, 1_000, 7] {
            #expect(try inflate(compressed, chunk: chunk) == original, "chunk \(chunk)")
        }
        // A small output buffer: one input chunk yields many pieces.
        #expect(try inflate(compressed, chunk: 1 << 20, outputChunkSize: 4096) == original)
    }

    @Test func corruptionTruncationAndTrailingBytesAreErrors() throws {
        let compressed = try gzipped(Self.sample())

        // A flipped byte: the deflate data or the CRC-32 in the trailer no longer matches.
        var flipped = compressed
        flipped[flipped.count / 2] ^= 0x5A
        let corrupt = #expect(throws: FerryError.self) { _ = try inflate(flipped, chunk: 65_536) }
        #expect(corrupt?.code == .verification)

        // Stopped early: no error while feeding, but finish() says the trailer never came.
        let inflater = try GzipInflater()
        try inflater.inflate(compressed.prefix(compressed.count - 3)) { _ in }
        #expect(!inflater.isFinished)
        #expect(throws: FerryError.self) { try inflater.finish() }

        // Bytes after the end of the stream.
        let trailing = #expect(throws: FerryError.self) {
            _ = try inflate(compressed + Data([0x1f, 0x8b, 0]), chunk: 1 << 30)
        }
        #expect(trailing?.message.contains("follow the end") == true)

        // Not gzip at all.
        #expect(throws: FerryError.self) { _ = try inflate(Data("SQLite format 3\0".utf8), chunk: 4) }
    }

    @Test func decompressFileUsesTheSameChecks() throws {
        let temp = try TemporaryDirectory("ferry-gzip")
        defer { temp.remove() }
        let original = Self.sample()
        var compressed = try gzipped(original)
        try compressed.write(to: temp.appending("a.gz"))
        try Gzip.decompressFile(from: temp.appending("a.gz"), to: temp.appending("a"))
        #expect(try Data(contentsOf: temp.appending("a")) == original)

        compressed.removeLast(4)
        try compressed.write(to: temp.appending("b.gz"))
        let error = #expect(throws: FerryError.self) {
            try Gzip.decompressFile(from: temp.appending("b.gz"), to: temp.appending("b"))
        }
        #expect(error?.code == .verification)
        #expect(error?.path == temp.appending("b.gz").path)
    }
}
