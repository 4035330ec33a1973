import FerryCore
import FerryTestSupport
import Foundation
import Testing

@testable import FerryClient

/// The partial download's writer: it continues at the kept prefix, and cuts whatever a crash left after it.
@Suite struct PartialFileWriterTests {
    func write(_ bytes: [UInt8], to url: URL, at offset: Int64) throws {
        let writer = try PartialFileWriter(url: url, offset: offset, bufferSize: 4096)
        try bytes.withUnsafeBytes { try writer.write($0) }
        try writer.finish()
    }

    @Test func continuesAtTheKeptPrefixAndCutsWhatFollowsIt() throws {
        let temp = try TemporaryDirectory("ferry-partial-writer")
        defer { temp.remove() }
        let url = temp.appending("partial.sqlite")

        // A fresh download: the file is created, and holds exactly what was written.
        try write(Array(0..<100), to: url, at: 0)
        #expect(try Data(contentsOf: url) == Data(Array(0..<100)))

        // A resume at the file's end keeps every byte before it.
        try write([200, 201], to: url, at: 100)
        #expect(try Data(contentsOf: url) == Data(Array(0..<100) + [200, 201]))

        // A resume before the end (a crash left bytes the record does not vouch for): they are cut.
        try write([7, 7, 7], to: url, at: 40)
        #expect(try Data(contentsOf: url) == Data(Array(0..<40) + [7, 7, 7]))

        // Starting over at 0 on a file that holds bytes: nothing of them is left.
        try write([1], to: url, at: 0)
        #expect(try Data(contentsOf: url) == Data([1]))
    }
}
