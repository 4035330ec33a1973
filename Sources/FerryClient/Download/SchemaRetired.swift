import FerryCore
import Foundation

/// HTTP 410 on a dataset's manifest, a version, a patch or an object: the server has retired every schema line this
/// app build accepts (or the line a download was under). Nothing local is touched: `database.db`, `updated.db`, a
/// partial download and the outbox all stay as they are, and the app goes on reading what it has.
enum SchemaRetired {
    /// The most of a 410's body read for its message.
    static let bodyLimit = 64 << 10

    /// The ``FerryError/Code/schemaRetired`` error for a 410 from `url`, with the server's own message
    /// (`{"error":{"code":"gone","message":"… lines served: 2"}}`) when its body has one.
    ///
    /// ```swift
    /// if head.status == 410 { throw await SchemaRetired.error(dataset: "trips", url: url, body: body) }
    /// ```
    static func error(dataset: String, url: URL, body: TransportResponseBody) async -> FerryError {
        var data = Data()
        do {
            for try await chunk in body {
                data.append(chunk.prefix(bodyLimit - data.count))
                if data.count >= bodyLimit { break }
            }
        } catch {
            // The status already says what happened: a body that broke off only loses the server's wording.
            data = Data()
        }
        return error(dataset: dataset, url: url.absoluteString, serverMessage: data.isEmpty ? nil : data)
    }

    static func error(dataset: String, url: String, serverMessage body: Data?) -> FerryError {
        let said = body.map { " (the server says: \(ChangeUploadResponse.errorMessage($0)))" } ?? ""
        return FerryError(
            .schemaRetired,
            "this app build is too old for dataset '\(dataset)': update the app\(said); \(url) answered 410 Gone. database.db, a pending update, a partial download and the queued edits are kept",
            key: "dataset")
    }
}
