import FerryCore
import FerryTestSupport
import Foundation
import Testing

/// The streaming inflater against files gzipped by `Gzip.compressFile` (what the publisher stores): any split of the
/// input gives the same bytes; corruption, truncation and trailing bytes are errors. Every test runs on each engine:
/// the platform's (igzip on Linux) and zlib's.
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

    func gzipped(_ data: Data, level: Int32 = 6) throws -> Data {
        let temp = try TemporaryDirectory("ferry-gzip")
        defer { temp.remove() }
        let plain = temp.appending("plain")
        try data.write(to: plain)
        try Gzip.compressFile(from: plain, to: temp.appending("plain.gz"), level: level)
        return try Data(contentsOf: temp.appending("plain.gz"))
    }

    func inflate(
        _ compressed: Data, chunk: Int, outputChunkSize: Int = 256 << 10, engine: GzipInflater.Engine = .platform
    ) throws -> Data {
        let inflater = try GzipInflater(outputChunkSize: outputChunkSize, engine: engine)
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

    @Test(arguments: GzipInflater.Engine.allCases) func anySplitOfTheInputGivesTheSameBytes(
        engine: GzipInflater.Engine
    ) throws {
        let original = Self.sample()
        let compressed = try gzipped(original)
        #expect(compressed.count < original.count)
        for chunk in [1 << 30, 65_536, 16_384, 1_000, 7] {
            #expect(try inflate(compressed, chunk: chunk, engine: engine) == original, "chunk \(chunk)")
        }
        // A small output buffer: one input chunk yields many pieces.
        #expect(try inflate(compressed, chunk: 1 << 20, outputChunkSize: 4096, engine: engine) == original)
    }

    @Test(arguments: GzipInflater.Engine.allCases) func corruptionTruncationAndTrailingBytesAreErrors(
        engine: GzipInflater.Engine
    ) throws {
        let compressed = try gzipped(Self.sample())

        // A flipped byte: the deflate data or the CRC-32 in the trailer no longer matches.
        var flipped = compressed
        flipped[flipped.count / 2] ^= 0x5A
        let corrupt = #expect(throws: FerryError.self) { _ = try inflate(flipped, chunk: 65_536, engine: engine) }
        #expect(corrupt?.code == .verification)

        // Stopped early: no error while feeding, but finish() says the trailer never came.
        let inflater = try GzipInflater(engine: engine)
        try inflater.inflate(compressed.prefix(compressed.count - 3)) { _ in }
        #expect(!inflater.isFinished)
        #expect(throws: FerryError.self) { try inflater.finish() }

        // Bytes after the end of the stream.
        let trailing = #expect(throws: FerryError.self) {
            _ = try inflate(compressed + Data([0x1f, 0x8b, 0]), chunk: 1 << 30, engine: engine)
        }
        #expect(trailing?.message.contains("follow the end") == true)

        // Not gzip at all.
        #expect(throws: FerryError.self) { _ = try inflate(Data("SQLite format 3\0".utf8), chunk: 4, engine: engine) }
    }

    /// `inflate(_:into:)`, the download's path: inflated straight into the caller's blocks of `block` bytes.
    func inflateIntoBlocks(_ compressed: Data, chunk: Int, block: Int, engine: GzipInflater.Engine) throws -> Data {
        let inflater = try GzipInflater(engine: engine)
        let output = UnsafeMutableRawBufferPointer.allocate(byteCount: block, alignment: 1)
        defer { output.deallocate() }
        var out = Data()
        var filled = 0
        for start in stride(from: 0, to: compressed.count, by: chunk) {
            try compressed.subdata(in: start..<min(compressed.count, start + chunk)).withUnsafeBytes { input in
                var offset = 0
                while offset < input.count {
                    let (consumed, produced) = try inflater.inflate(
                        UnsafeRawBufferPointer(rebasing: input[offset...]),
                        into: UnsafeMutableRawBufferPointer(rebasing: output[filled...]))
                    offset += consumed
                    filled += produced
                    if filled == block {
                        out.append(contentsOf: UnsafeRawBufferPointer(output))
                        filled = 0
                    }
                }
            }
        }
        out.append(contentsOf: UnsafeRawBufferPointer(rebasing: output[..<filled]))
        try inflater.finish()
        return out
    }

    /// The platform's engine and zlib give the same bytes on random data of every kind: incompressible (stored
    /// blocks), runs (long matches), text, empty; at each zlib level; fed in odd-sized chunks, through both entry
    /// points. On Linux the platform's engine is igzip, so this compares igzip with zlib.
    @Test func platformEngineMatchesZlibOnRandomData() throws {
        #if os(Linux)
            #expect(GzipInflater.platformEngineName == "igzip")
        #endif
        var generator = SystemRandomNumberGenerator()
        let noise = Data((0..<(1 << 20) + 13).map { _ in UInt8.random(in: 0...255, using: &generator) })
        let runs = Data(
            (0..<4000).flatMap { _ in
                [UInt8](repeating: UInt8.random(in: 0...3, using: &generator), count: Int.random(in: 1...900))
            })
        let inputs: [Data] = [Data(), Data([42]), noise, runs, Self.sample(), runs + noise + runs]
        for (index, original) in inputs.enumerated() {
            for level: Int32 in [0, 1, 6, 9] {
                let compressed = try gzipped(original, level: level)
                let chunk = Int.random(in: 1...70_000, using: &generator)
                let fast = try inflate(compressed, chunk: chunk, engine: .platform)
                let reference = try inflate(compressed, chunk: chunk, engine: .zlib)
                #expect(fast == reference, "input \(index), level \(level), chunk \(chunk)")
                #expect(fast == original, "input \(index), level \(level), chunk \(chunk)")
                let block = Int.random(in: 1...300_000, using: &generator)
                for engine in GzipInflater.Engine.allCases {
                    let blocks = try inflateIntoBlocks(compressed, chunk: chunk, block: block, engine: engine)
                    #expect(
                        blocks == original, "\(engine): input \(index), level \(level), chunk \(chunk), block \(block)")
                }
            }
        }
    }

    /// What each engine refuses, the other refuses too: a flipped byte anywhere but the header's unchecked fields
    /// (flags, time, extra flags and OS byte are not covered by any check) unless it inflates to the same bytes, a
    /// stream cut at any point, a wrong
    /// length in the trailer, and a second gzip member (a snapshot's gzip copy is one member).
    @Test(arguments: GzipInflater.Engine.allCases) func everyDamageIsRefused(engine: GzipInflater.Engine) throws {
        let original = Data(Self.sample().prefix(200_000))
        let compressed = try gzipped(original, level: 1)
        var generator = SystemRandomNumberGenerator()
        // Byte 3 (FLG) and bytes 4-9 (MTIME, XFL, OS) change nothing checkable, nor do the padding bits after the
        // final block's end code, in the last byte before the 8-byte trailer; every other byte matters.
        let positions =
            [0, 1, 2] + (10..<compressed.count - 9).shuffled(using: &generator).prefix(300)
            + Array(compressed.count - 8..<compressed.count)
        // Rarely a flipped byte of a dynamic block's code lengths touches only symbols the block never uses, and
        // the stream still inflates to the same bytes (seen once in CI, at byte 84,727 of 98,812): harmless. What
        // must never happen is other bytes accepted.
        var accepted: [Int] = []
        for position in positions {
            var flipped = compressed
            flipped[position] ^= UInt8.random(in: 1...255, using: &generator)
            do {
                let inflated = try inflate(flipped, chunk: 4096, engine: engine)
                #expect(inflated == original, "byte \(position) of \(compressed.count): other bytes accepted")
                accepted.append(position)
            } catch is FerryError {}
        }
        #expect(accepted.count <= 3, "flips accepted at \(accepted) of \(positions.count)")
        for cut in [1, 9, 10, 11, 100, compressed.count / 2, compressed.count - 8, compressed.count - 1] {
            let inflater = try GzipInflater(engine: engine)
            try inflater.inflate(compressed.prefix(cut)) { _ in }
            #expect(!inflater.isFinished, "cut at \(cut)")
            #expect(throws: FerryError.self, "cut at \(cut)") { try inflater.finish() }
        }
        var wrongLength = compressed
        wrongLength[wrongLength.count - 1] ^= 0x01
        #expect(throws: FerryError.self) { _ = try inflate(wrongLength, chunk: 1 << 30, engine: engine) }

        let second = try gzipped(Data("a second member".utf8))
        let twoMembersInBlocks = #expect(throws: FerryError.self) {
            _ = try inflateIntoBlocks(compressed + second, chunk: 1 << 30, block: 1 << 20, engine: engine)
        }
        #expect(twoMembersInBlocks?.message.contains("follow the end") == true)
        let twoMembers = #expect(throws: FerryError.self) {
            _ = try inflate(compressed + second, chunk: 1 << 30, engine: engine)
        }
        #expect(twoMembers?.message.contains("follow the end") == true)
        // Split at the seam: the second member comes in its own call.
        let inflater = try GzipInflater(engine: engine)
        try inflater.inflate(compressed) { _ in }
        #expect(inflater.isFinished)
        #expect(throws: FerryError.self) { try inflater.inflate(second) { _ in } }
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
