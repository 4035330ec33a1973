import FerryCore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Testing

@testable import FerryServer

@Suite struct RouteTests {
    @Test func datasetsListManifestAndHealth() async throws {
        let store = try TestStore()
        defer { store.remove() }
        try store.publish("trips")
        let parks = try store.publish("parks")
        let trips = try store.publish("trips")

        try await store.withLiveServer { client in
            // GET /v1/datasets → every manifest, sorted by name
            let list = try await client.execute(uri: "/v1/datasets", method: .get)
            #expect(list.status == .ok)
            #expect(list.header("Content-Type") == "application/json")
            struct Wire: Decodable { let datasets: [Manifest] }
            let decoded = try JSONDecoder().decode(Wire.self, from: list.bodyData)
            #expect(decoded.datasets == [parks, trips])

            // GET manifest → the manifest, ETag "<sha256>", no-cache, 304 on If-None-Match
            let manifest = try await client.execute(uri: "/v1/datasets/trips/manifest", method: .get)
            #expect(manifest.status == .ok)
            #expect(try Manifest.decode(manifest.bodyData) == trips)
            #expect(manifest.header("ETag") == "\"\(trips.sha256)\"")
            #expect(manifest.header("Cache-Control") == "no-cache")
            #expect(manifest.header("Content-Type") == "application/json")
            for value in ["\"\(trips.sha256)\"", "*", "\"x\", W/\"\(trips.sha256)\""] {
                let revalidated = try await client.execute(
                    uri: "/v1/datasets/trips/manifest", method: .get, headers: [.ifNoneMatch: value])
                #expect(revalidated.status == .notModified, "\(value)")
                #expect(revalidated.body.readableBytes == 0)
                #expect(revalidated.header("ETag") == "\"\(trips.sha256)\"")
            }
            let stale = try await client.execute(
                uri: "/v1/datasets/trips/manifest", method: .get, headers: [.ifNoneMatch: "\"\(parks.sha256)\""])
            #expect(stale.status == .ok)

            let health = try await client.execute(uri: "/healthz", method: .get)
            #expect(health.status == .ok)
            #expect(health.bodyString == #"{"status":"ok"}"#)
        }
    }

    @Test func traversalAndBadNamesNeverReachAFileOutsideTheStore() async throws {
        // Given a store and a secret file next to it
        let store = try TestStore()
        defer { store.remove() }
        try store.publish()
        let secret = store.directory.url.deletingLastPathComponent().appendingPathComponent(
            "ferry-secret-\(UUID().uuidString).sqlite")
        try Data("root:x:0:0".utf8).write(to: secret)
        defer { try? FileManager.default.removeItem(at: secret) }

        try await store.withLiveServer { client in
            let attempts = [
                "/v1/datasets/../snapshot",
                "/v1/datasets/..%2F..%2Fetc/snapshot",
                "/v1/datasets/%2e%2e/snapshot",
                "/v1/datasets/%2E%2E%2F%2E%2E/manifest",
                "/v1/datasets/trips/versions/..%2F..%2F\(secret.lastPathComponent)",
                "/v1/datasets/trips/versions/%2e%2e",
                "/v1/datasets/%2Fetc%2Fpasswd/snapshot",
                "/v1/datasets//etc/passwd/snapshot",
                "/v1/datasets/trips%00/snapshot",
                "/v1/datasets/trips/versions/1%00",
                "/v1/datasets/TRIPS/snapshot",
                "/v1/datasets/trips.sqlite/snapshot",
                "/v1/datasets/\(String(repeating: "a", count: 65))/snapshot",
                "/v1/datasets/tmp/snapshot",
                "/v1/datasets/trips/versions/1/../../../../etc/passwd",
                "/../../etc/passwd",
                "/v1/datasets/trips/tmp/x.sqlite",
                "/v1/datasets/trips/manifest.json",
            ]
            for uri in attempts {
                let response = try await client.execute(uri: uri, method: .get)
                #expect(response.status == .badRequest || response.status == .notFound, "\(uri) → \(response.status)")
                #expect(response.header("Content-Type") == "application/json", "\(uri)")
                #expect(!response.bodyString.contains("root:x"), "\(uri)")
                #expect(response.bodyString.hasPrefix(#"{"error":{"code":"#), "\(uri)")
            }
            // Names that are well-formed but unknown are 404, malformed ones 400
            #expect(try await client.execute(uri: "/v1/datasets/nope/snapshot", method: .get).status == .notFound)
            #expect(try await client.execute(uri: "/v1/datasets/nope/manifest", method: .get).status == .notFound)
            #expect(try await client.execute(uri: "/v1/datasets/nope/versions/1", method: .get).status == .notFound)
            #expect(try await client.execute(uri: "/v1/datasets/Bad.Name/snapshot", method: .get).status == .badRequest)
            #expect(try await client.execute(uri: "/v1/datasets/%2e%2e/manifest", method: .get).status == .badRequest)
        }
    }

    @Test func otherMethodsAre405WithAllow() async throws {
        let store = try TestStore()
        defer { store.remove() }
        try store.publish()
        try await store.withLiveServer { client in
            for (method, uri) in [
                (HTTPRequest.Method.post, "/v1/datasets/trips/snapshot"), (.delete, "/v1/datasets/trips/versions/1"),
                (.put, "/v1/datasets/trips/manifest"), (.patch, "/v1/datasets"),
                (.options, "/v1/datasets/trips/snapshot"),
            ] {
                let response = try await client.execute(uri: uri, method: method)
                #expect(response.status == .methodNotAllowed, "\(method) \(uri)")
                #expect(response.header("Allow") == "GET, HEAD", "\(method) \(uri)")
                #expect(response.bodyString.contains(#""code":"method-not-allowed""#))
            }
            let unknown = try await client.execute(uri: "/v2/anything", method: .get)
            #expect(unknown.status == .notFound)
            #expect(unknown.bodyString.contains(#""code":"not-found""#))
        }
    }

    @Test func metricsCountRequestsBytesAnd304sAndDescribeDatasets() async throws {
        let store = try TestStore()
        defer { store.remove() }
        try store.publish()
        let manifest = try store.publish()

        try await store.withLiveServer { client in
            _ = try await client.execute(uri: "/v1/datasets/trips/snapshot", method: .get)
            _ = try await client.execute(uri: "/v1/datasets/trips/snapshot", method: .get)
            _ = try await client.execute(
                uri: "/v1/datasets/trips/snapshot", method: .get, headers: [.ifNoneMatch: "\"\(manifest.sha256)\""])
            let missing = try await client.execute(uri: "/v1/datasets/nope/snapshot", method: .get)

            let response = try await client.execute(uri: "/metrics", method: .get)
            #expect(response.status == .ok)
            #expect(response.header("Content-Type")?.hasPrefix("text/plain") == true)
            let text = response.bodyString
            func value(_ prefix: String) -> Double? {
                text.split(separator: "\n").first { $0.hasPrefix(prefix + " ") }.flatMap {
                    Double($0.split(separator: " ").last!)
                }
            }
            let route = "/v1/datasets/{dataset}/snapshot"
            #expect(value(#"ferry_http_requests_total{route="\#(route)",status="200"}"#) == 2, "\(text)")
            #expect(value(#"ferry_http_requests_total{route="\#(route)",status="304"}"#) == 1)
            #expect(value(#"ferry_http_requests_total{route="\#(route)",status="404"}"#) == 1)
            #expect(value(#"ferry_http_not_modified_total{route="\#(route)"}"#) == 1)
            #expect(
                value(#"ferry_http_response_bytes_total{route="\#(route)"}"#)
                    == Double(2 * Int(manifest.size) + missing.body.readableBytes))
            #expect(value(#"ferry_dataset_version{dataset="trips"}"#) == 2)
            let age = try #require(value(#"ferry_dataset_age_seconds{dataset="trips"}"#))
            #expect(age >= 0 && age < 600)
        }
    }
}
