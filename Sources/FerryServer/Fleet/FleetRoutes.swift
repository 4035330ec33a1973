import FerryCore
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// The fleet's routes, for the operator (status token, as ``StatusRoutes``; every answer `Cache-Control: no-store`):
/// - `GET /v1/devices?dataset=D&limit=N`: `{"devices":[…]}`, most recently seen first (every dataset without
///   `dataset`; at most `limit`, default 1000, at most 100000).
/// - `GET /v1/devices/{id}?dataset=D`: `{"device":id,"datasets":[…]}`, 404 for a device the fleet does not hold.
/// - `GET /status/devices?sort=COLUMN&order=asc|desc`: the same as an HTML table (``FleetPage``).
/// - `GET /v1/datasets/{dataset}/explain?device=ID&row=TABLE:KEY`: a ``RowExplanation`` (``RowExplainer``); 404
///   naming an unknown dataset or device, 400 naming a malformed row.
struct FleetRoutes: ServerRouteGroup {
    let access: StatusAccess
    let fleet: DeviceFleet
    let explainer: RowExplainer

    func addRoutes(to routes: ServerRoutes) throws {
        let access = self.access
        let fleet = fleet
        let explainer = explainer
        @Sendable func checked(_ request: Request) throws {
            do {
                try access.check(request)
            } catch var error as ServerError {
                error.headers[.cacheControl] = "no-store"
                throw error
            }
        }
        routes.on("/v1/devices", method: .get) { request, _ in
            try checked(request)
            let query = request.uri.queryParameters
            let dataset = try query["dataset"].map { try Self.datasetName(String($0)) }
            let limit = try Self.limit(query["limit"].map(String.init))
            let devices = try await fleet.devices(dataset: dataset, limit: limit)
            return try Self.json(["devices": devices])
        }
        let catalog = routes.catalog
        routes.on("/status/devices", method: .get) { request, _ in
            try checked(request)
            let query = request.uri.queryParameters
            let sort =
                query["sort"].map(String.init).flatMap { key in
                    FleetPage.columns.contains { $0.key == key } ? key : nil
                } ?? "lastSeen"
            let descending = query["order"].map { $0 != "asc" } ?? true
            let limit = try Self.limit(query["limit"].map(String.init))
            let now = Date()
            let lines = FleetPage.sorted(
                FleetPage.lines(try await fleet.devices(dataset: nil, limit: limit), catalog: catalog, now: now),
                by: sort, descending: descending)
            let token = request.headers[.authorization] == nil ? query["token"].map(String.init) : nil
            var headers = StatusRoutes.headers(contentType: "text/html; charset=utf-8")
            headers[.contentSecurityPolicy] = StatusRoutes.contentSecurityPolicy
            let html = FleetPage.render(lines, sort: sort, descending: descending, token: token, now: now)
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: html)))
        }
        routes.on("/v1/devices/{id}", method: .get) { request, context in
            try checked(request)
            let id = context.parameters.get("id") ?? ""
            guard DeviceSightings.isValid(id) else { throw Self.badDevice(id) }
            let dataset = try request.uri.queryParameters["dataset"].map { try Self.datasetName(String($0)) }
            let records = try await fleet.device(id, dataset: dataset)
            guard !records.isEmpty else {
                throw ServerError(
                    .notFound, code: "unknown-device",
                    "unknown device '\(id)': the server has not seen it (or forgot it after --device-retention)")
            }
            struct One: Encodable {
                let device: String
                let datasets: [DeviceRecord]
            }
            return try Self.json(One(device: id, datasets: records))
        }
        routes.on("/v1/datasets/{dataset}/explain", method: .get) { request, context in
            try checked(request)
            let dataset = try Self.datasetName(context.parameters.get("dataset") ?? "")
            let query = request.uri.queryParameters
            guard let device = query["device"].map(String.init), DeviceSightings.isValid(device) else {
                throw Self.badDevice(query["device"].map(String.init) ?? "")
            }
            let reference: RowReference
            do {
                reference = try RowReference(parsing: query["row"].map(String.init) ?? "")
            } catch let error as FerryError {
                throw ServerError(.badRequest, code: error.code, error.message)
            }
            return try Self.json(try await explainer.explain(dataset: dataset, device: device, row: reference))
        }
    }

    static func datasetName(_ name: String) throws -> String {
        guard DatasetName.isValid(name) else {
            throw ServerError(
                .badRequest, code: .badInput,
                "dataset name '\(name.prefix(64))' is invalid: use 1-64 characters from a-z, 0-9, '_' and '-'")
        }
        return name
    }

    static func limit(_ text: String?) throws -> Int {
        guard let text else { return 1000 }
        guard let limit = Int(text), (1...100_000).contains(limit) else {
            throw ServerError(
                .badRequest, code: .badInput, "limit '\(text.prefix(20))' is not a number from 1 to 100000")
        }
        return limit
    }

    static func badDevice(_ id: String) -> ServerError {
        ServerError(
            .badRequest, code: .badInput,
            "device '\(id.prefix(80))' is not a device id: 1-64 characters of A-Z a-z 0-9 and '-' (the Ferry-Device header)"
        )
    }

    static func json(_ value: some Encodable) throws -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let data = try encoder.encode(value)
        return Response(
            status: .ok, headers: StatusRoutes.headers(contentType: "application/json"),
            body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}
