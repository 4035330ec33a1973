import ArgumentParser
import AsyncHTTPClient
import FerryClient
import FerryCore
import Foundation
import NIOCore
import NIOHTTP1

/// `ferry explain`: why a device shows, lacks, or holds an old copy of one row. With `--server`, the server's
/// answer (`GET /v1/datasets/{dataset}/explain`, the status token); with `--dir`, the device's own half (in
/// `database.db`? in the outbox? among the rejected edits?), with no server. Reads only.
struct ExplainCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "explain",
        abstract: "Explain why a device does or does not show a row (from the server, or from a client directory).",
        discussion: """
            ferry explain --server URL --status-token T --dataset DS --device ID --row TABLE:KEY asks the server: \
            is the row in PostgreSQL and in the device's scope (else which rule leaves it out), which version it \
            last changed in against the one the device holds, the device's uploaded changes of it with their \
            verdicts, and a one-line verdict. ferry explain --dir D --row TABLE:KEY answers the device's half. \
            A composite key is TABLE:K1,K2. Exit 1 names an unknown device or dataset; exit 2 a malformed --row.
            """)

    @Option(name: .long, help: "The server's base URL (with --status-token, --dataset and --device).")
    var server: String?

    @Option(
        name: .customLong("status-token"),
        help: "The server's status token (default: $FERRY_STATUS_TOKEN).")
    var statusToken: String?

    @Option(name: .long, help: "The dataset (or schema line) the device syncs.")
    var dataset: String?

    @Option(name: .long, help: "The device's id: its Ferry-Device, as `ferry status --json` prints it.")
    var device: String?

    @Option(name: .long, help: "A client directory: answer the device's own half, with no server.")
    var dir: String?

    @Option(name: .long, help: "The row, as TABLE:KEY (a composite key as TABLE:K1,K2).")
    var row: String

    @Flag(name: .long, help: "Print the answer as one line of JSON.")
    var json = false

    func validate() throws {
        do {
            _ = try RowReference(parsing: row)
        } catch let error as FerryError {
            throw ValidationError("--row \(error.message)")
        }
        switch (server, dir) {
        case (nil, nil): throw ValidationError("give --server (with --dataset and --device) or --dir")
        case (.some, .some): throw ValidationError("give --server or --dir, not both")
        case (.some, nil):
            guard dataset != nil, device != nil else {
                throw ValidationError("--server needs --dataset and --device")
            }
            guard token != nil else {
                throw ValidationError("--server needs --status-token (or FERRY_STATUS_TOKEN)")
            }
        case (nil, .some): break
        }
    }

    var token: String? { statusToken ?? ProcessInfo.processInfo.environment["FERRY_STATUS_TOKEN"] }

    func run() async throws {
        let reference = try RowReference(parsing: row)
        if let dir {
            let local = try await LocalRowExplanation.read(directory: URL(fileURLWithPath: dir), row: reference)
            print(json ? try JSONLine.fragment(local) : local.text)
            return
        }
        let explanation = try await fetch(reference)
        print(json ? try JSONLine.fragment(explanation) : explanation.text)
    }

    /// The server's explanation; its errors as exit 1 (unknown dataset or device, a refused token) or 2 (a row
    /// the server cannot read: an unknown table, a key of the wrong shape).
    func fetch(_ reference: RowReference) async throws -> RowExplanation {
        guard let server, let dataset, let device, let token else {
            throw ValidationError("--server needs its options")
        }
        var query = URLComponents()
        query.queryItems = [.init(name: "device", value: device), .init(name: "row", value: reference.text)]
        let base = server.hasSuffix("/") ? String(server.dropLast()) : server
        let path = dataset.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? dataset
        var request = HTTPClientRequest(
            url: "\(base)/v1/datasets/\(path)/explain?\(query.percentEncodedQuery ?? "")")
        request.headers.add(name: "Authorization", value: "Bearer \(token)")
        let response: HTTPClientResponse
        do {
            response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        } catch {
            throw FerryError(.network, "cannot reach \(base): \(error)")
        }
        let body = try await response.body.collect(upTo: 4 << 20)
        let data = Data(body.readableBytesView)
        guard response.status == .ok else {
            let message =
                // A body that is not Ferry's error JSON: the HTTP status alone is reported.
                (try? JSONDecoder().decode(ErrorBody.self, from: data))?.error.message
                ?? "HTTP \(response.status.code)"
            switch response.status {
            case .badRequest: throw ValidationError(message)
            case .unauthorized: throw FerryError(.unauthorized, "\(message) (--status-token)")
            case .notFound: throw FerryError(.notFound, message)
            default: throw FerryError(.network, "\(base) answered \(response.status.code): \(message)")
            }
        }
        return try JSONDecoder().decode(RowExplanation.self, from: data)
    }

    struct ErrorBody: Decodable {
        struct Inner: Decodable { let message: String }
        let error: Inner
    }
}

extension RowExplanation {
    /// The answer for a person: what the server knows, then the verdict.
    var text: String {
        var lines: [String] = []
        let held = deviceVersion.map { "holds version \($0)" } ?? "holds no version"
        let scopeText = scope.map { ", scope \($0)" } ?? ""
        lines.append("device \(device) \(held) of \(dataset) (current \(currentVersion)\(scopeText))")
        var rowText = "row \(table):\(key.joined(separator: ",")): "
        rowText += row.present ? "in PostgreSQL" : "not in PostgreSQL"
        if row.present { rowText += row.inScope ? ", in the device's scope" : ", outside the device's scope" }
        if let rule = row.rule { rowText += " (\(rule))" }
        if let changed = row.lastChangedIn { rowText += "; last changed in version \(changed)" }
        if let at = row.changedAt { rowText += " (at \(at))" }
        lines.append(rowText)
        lines.append("changes uploaded by this device: \(changes.count)")
        for change in changes {
            var line = "  \(change.at)  \(change.status)"
            if let lost = change.lost, !lost.isEmpty { line += "  lost: \(lost.joined(separator: ", "))" }
            if let message = change.message { line += "  \(message)" }
            lines.append(line)
        }
        lines.append("verdict (\(verdict.code)): \(verdict.text)")
        return lines.joined(separator: "\n")
    }
}
