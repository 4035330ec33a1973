import FerryCore
import Foundation

/// Inputs for the tests of the parallel gzip copy (zlib's and the publisher's igzip).
public enum GzipSamples {
    /// Compressible text with random runs in between, `count` bytes.
    public static func text(_ count: Int) -> Data {
        var generator = SystemRandomNumberGenerator()
        var data = Data()
        while data.count < count {
            data.append(Data("row \(data.count): Växjö-Kalmar, seats 42; ".utf8))
            if generator.next() % 4 == 0 {
                data.append(Data((0..<97).map { _ in UInt8.random(in: 0...255, using: &generator) }))
            }
        }
        return data.prefix(count)
    }

    /// A snapshot-like SQLite file at `url`: 60,000 rows of a campgrounds table and an index, about 8 MB.
    public static func snapshot(at url: URL) throws {
        let db = try SQLiteConnection(path: url.path)
        try db.execute(
            "CREATE TABLE campgrounds (id INTEGER PRIMARY KEY, name TEXT, region TEXT, latitude REAL, updated_at TEXT); BEGIN"
        )
        let insert = try db.prepare("INSERT INTO campgrounds VALUES (?, ?, ?, ?, ?)")
        for i in 0..<60_000 {
            try insert.bind([
                .integer(Int64(i)), .text("Campground \(i) by the lake \(i % 97)"),
                .text(["north", "south", "east", "west"][i % 4]),
                .real(Double(i % 9000) / 100), .text("2026-11-\(10 + i % 18)T12:\(i % 60):00Z"),
            ])
            try insert.step()
            insert.reset()
        }
        try db.execute("CREATE INDEX campgrounds_region ON campgrounds (region, name); COMMIT")
    }
}
