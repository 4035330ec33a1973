import FerryCore
import HTTPTypes

/// The schema lines of one dataset as the catalog serves them (docs/schema-lines.md): the schema versions of its
/// live lines and of its retired ones, each ascending.
struct SchemaLines: Sendable, Equatable {
    var live: [Int] = []
    var retired: [Int] = []

    /// Groups the catalog's line datasets (`BASE.vN` → retired or not) by base name; other datasets are left out.
    static func index(_ datasets: [String: Bool]) -> [String: SchemaLines] {
        var index: [String: SchemaLines] = [:]
        for (name, retired) in datasets {
            guard let (base, schemaVersion) = DatasetName.split(name), let schemaVersion else { continue }
            if retired {
                index[base, default: SchemaLines()].retired.append(schemaVersion)
            } else {
                index[base, default: SchemaLines()].live.append(schemaVersion)
            }
        }
        for base in index.keys {
            index[base]!.live.sort()
            index[base]!.retired.sort()
        }
        return index
    }

    /// `410 Gone` for a request of retired lines `asked` of dataset `base`, naming the lines still served.
    func gone(base: String, asked: [Int]) -> ServerError {
        ServerError(
            .gone, code: "gone",
            "schema line \(Self.list(asked)) of dataset '\(base)' is retired (lines served: \(Self.list(live))): an app that accepts a line served can sync"
        )
    }

    /// `1, 2`, or `none`.
    static func list(_ versions: [Int]) -> String {
        versions.isEmpty ? "none" : versions.sorted().map(String.init).joined(separator: ", ")
    }

    /// The `schema` query parameter: accepted schema versions, comma-separated (`?schema=1,2`); nil when absent.
    /// Anything but positive decimal numbers is a `400` naming the parameter.
    static func accepted(_ query: Substring?) throws -> Set<Int>? {
        guard let query else { return nil }
        var accepted: Set<Int> = []
        for part in query.split(separator: ",", omittingEmptySubsequences: false) {
            guard let number = SnapshotResponder.versionNumber(String(part)), number <= 999_999_999 else {
                throw ServerError(
                    .badRequest, code: .badInput,
                    "query parameter schema=\(query.prefix(80)) is invalid: give the accepted schema versions as positive whole numbers separated by commas, e.g. ?schema=1,2"
                )
            }
            accepted.insert(number)
        }
        return accepted
    }
}
