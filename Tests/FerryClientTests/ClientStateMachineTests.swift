import FerryCore
import Foundation
import Testing

@testable import FerryClient

/// The pure parts of the client: state derivation, response decisions, header parsing, swap plans, status JSON.
/// No files, no network.
@Suite struct ClientStateMachineTests {
    let sha = String(repeating: "ab", count: 32)
    let other = String(repeating: "cd", count: 32)
    let url = "http://127.0.0.1:1/v1/datasets/x/snapshot"

    func head(_ status: Int, _ headers: [String: String] = [:]) -> TransportResponseHead {
        TransportResponseHead(status: status, headers: headers)
    }

    /// The SQLite file itself as the representation on the wire, `size` bytes long.
    func identity(_ size: Int64?, sha256: String? = nil) -> TransferSource {
        TransferSource(url: url, encoding: .identity, size: size, etag: "\"\(sha256 ?? sha)\"")
    }

    func base64(_ hex: String) -> String { Data(FileDigest.bytes(fromHex: hex)!).base64EncodedString() }

    @Test func stateIsDerivedFromFiles() {
        #expect(SyncState.derive(hasDatabase: false, hasUpdate: false) == .initialSyncRequired)
        #expect(SyncState.derive(hasDatabase: true, hasUpdate: false) == .upToDate)
        #expect(SyncState.derive(hasDatabase: true, hasUpdate: true) == .updatePending)
        #expect(SyncState.derive(hasDatabase: false, hasUpdate: true) == .updatePending)
    }

    @Test func notModified() throws {
        #expect(
            try ResponsePlan.decide(head: head(304, ["ETag": "\"\(sha)\""]), resumeFrom: nil, partial: nil, url: url)
                == .notModified)
    }

    @Test func refusedTokenIsUnauthorizedAndNeverARestart() {
        let partial = ExpectedSnapshot(sha256: sha, size: 1234, version: 3)
        for status in [401, 403] {
            for resumeFrom in [nil, 100] as [Int64?] {
                let error = #expect(throws: FerryError.self) {
                    try ResponsePlan.decide(
                        head: head(status, ["WWW-Authenticate": #"Bearer realm="ferry", error="invalid_token""#]),
                        resumeFrom: resumeFrom,
                        partial: resumeFrom == nil ? nil : partial, url: url)
                }
                #expect(error?.code == .unauthorized)
                #expect(error?.message.contains("(\(status))") == true)
                #expect(error?.message.contains("local data and queued edits are kept") == true)
            }
        }
        // Any other 4xx stays a plain network error
        #expect(
            (#expect(throws: FerryError.self) {
                try ResponsePlan.decide(head: head(429), resumeFrom: nil, partial: nil, url: url)
            })?.code == .network)
    }

    @Test func fullResponseTakesChecksumSizeAndVersion() throws {
        let plan = try ResponsePlan.decide(
            head: head(
                200,
                [
                    "ETag": "\"\(sha)\"", "Repr-Digest": "sha-256=:\(base64(sha)):", "Content-Length": "1234",
                    "Ferry-Version": "7",
                ]),
            resumeFrom: nil, partial: nil, url: url)
        #expect(plan == .full(ExpectedSnapshot(sha256: sha, size: 1234, version: 7), identity(1234)))
        // A server that ignores Range answers 200 to a range request: the plan is a fresh, full download.
        let ignored = try ResponsePlan.decide(
            head: head(200, ["ETag": "\"\(sha)\"", "Content-Length": "1234"]), resumeFrom: 100,
            partial: ExpectedSnapshot(sha256: sha, size: 1234, version: nil), url: url)
        #expect(ignored == .full(ExpectedSnapshot(sha256: sha, size: 1234, version: nil), identity(1234)))
    }

    @Test func fullResponseWithoutUsableChecksumIsRefused() {
        #expect(throws: FerryError.self) {
            try ResponsePlan.decide(head: head(200, ["Content-Length": "10"]), resumeFrom: nil, partial: nil, url: url)
        }
        #expect(throws: FerryError.self) {  // weak ETag only
            try ResponsePlan.decide(head: head(200, ["ETag": "W/\"\(sha)\""]), resumeFrom: nil, partial: nil, url: url)
        }
        #expect(throws: FerryError.self) {  // ETag and Repr-Digest disagree
            try ResponsePlan.decide(
                head: head(200, ["ETag": "\"\(sha)\"", "Repr-Digest": "sha-256=:\(base64(other)):"]), resumeFrom: nil,
                partial: nil, url: url)
        }
        #expect(throws: FerryError.self) {  // compressed although identity was asked for
            try ResponsePlan.decide(
                head: head(200, ["ETag": "\"\(sha)\"", "Content-Encoding": "gzip"]), resumeFrom: nil, partial: nil,
                url: url)
        }
        // Repr-Digest alone is enough.
        #expect(
            (try? ResponsePlan.decide(
                head: head(200, ["Repr-Digest": "sha-256=:\(base64(sha)):"]), resumeFrom: nil, partial: nil, url: url))
                == .full(ExpectedSnapshot(sha256: sha, size: nil, version: nil), identity(nil)))
    }

    @Test func partialContentMustContinueExactly() throws {
        let partial = ExpectedSnapshot(sha256: sha, size: 1000, version: 3)
        func decide(_ headers: [String: String], from: Int64? = 400) throws -> ResponsePlan {
            try ResponsePlan.decide(
                head: head(206, headers), resumeFrom: from, partial: from == nil ? nil : partial, url: url)
        }
        #expect(
            try decide(["Content-Range": "bytes 400-999/1000", "ETag": "\"\(sha)\"", "Content-Length": "600"])
                == .resume(from: 400, partial, identity(1000)))
        // Starts elsewhere, stops early, other total, other ETag, bad length, no Content-Range, unrequested.
        for headers in [
            ["Content-Range": "bytes 0-999/1000"], ["Content-Range": "bytes 400-899/1000"],
            ["Content-Range": "bytes 400-1199/1200"],
            ["Content-Range": "bytes 400-999/1000", "ETag": "\"\(other)\""],
            ["Content-Range": "bytes 400-999/1000", "Content-Length": "10"], [:],
        ] {
            guard case .restartFromZero = try decide(headers) else {
                Issue.record("expected a restart for \(headers)")
                continue
            }
        }
        guard case .restartFromZero = try decide(["Content-Range": "bytes 0-999/1000"], from: nil) else {
            Issue.record("a 206 to a request without Range must restart")
            return
        }
    }

    /// The gzip copy: the checksum comes from the `"<sha256>-gzip"` ETag (Repr-Digest names the compressed bytes),
    /// the wire size from Content-Length, the file size from the manifest; a resume must stay in that representation.
    @Test func gzipResponsesAreTheGzipRepresentation() throws {
        let promised = ExpectedSnapshot(sha256: sha, size: 5000, version: 4)
        let gzipSource = TransferSource(url: url, encoding: .gzip, size: 1200, etag: "\"\(sha)-gzip\"")
        let gzipDigest = "sha-256=:\(base64(other)):"
        let full = try ResponsePlan.decide(
            head: head(
                200,
                [
                    "ETag": "\"\(sha)-gzip\"", "Content-Encoding": "gzip", "Content-Length": "1200",
                    "Repr-Digest": gzipDigest, "Ferry-Version": "4",
                ]),
            resumeFrom: nil, partial: nil, promised: promised, url: url)
        #expect(full == .full(promised, gzipSource))

        // Gzip with no ETag at all (a proxy stripped it): the manifest's promise is the checksum the inflated bytes
        // are checked against; without a promise nothing could be verified
        let stripped = try ResponsePlan.decide(
            head: head(200, ["Content-Encoding": "gzip", "Content-Length": "1200", "Repr-Digest": gzipDigest]),
            resumeFrom: nil, partial: nil, promised: promised, url: url)
        #expect(stripped == .full(ExpectedSnapshot(sha256: sha, size: 5000, version: 4), gzipSource))
        #expect(throws: FerryError.self) {
            try ResponsePlan.decide(
                head: head(200, ["Content-Encoding": "gzip"]), resumeFrom: nil, partial: nil, promised: nil, url: url)
        }

        // Gzip with another ETag than the gzip one, the gzip ETag without gzip, another coding, or another checksum
        // than promised
        for headers in [
            ["Content-Encoding": "gzip", "ETag": "\"\(sha)\""], ["ETag": "\"\(sha)-gzip\""],
            ["Content-Encoding": "br", "ETag": "\"\(sha)-gzip\""],
            ["Content-Encoding": "gzip", "ETag": "\"\(other)-gzip\""],
            ["ETag": "\"\(sha)\"", "Ferry-Version": "5"],
        ] {
            #expect(throws: FerryError.self, "\(headers)") {
                try ResponsePlan.decide(
                    head: head(200, headers), resumeFrom: nil, partial: nil, promised: promised, url: url)
            }
        }

        // A server without a gzip copy answers with the file itself: just as good
        let identity = try ResponsePlan.decide(
            head: head(200, ["ETag": "\"\(sha)\"", "Content-Length": "5000"]), resumeFrom: nil, partial: nil,
            promised: promised, url: url)
        #expect(identity == .full(promised, self.identity(5000)))

        // 206 of the gzip copy continues exactly; the identity ETag or encoding is another representation: restart
        func decide(_ headers: [String: String]) throws -> ResponsePlan {
            try ResponsePlan.decide(
                head: head(206, headers), resumeFrom: 400, partial: promised, source: gzipSource, promised: promised,
                url: url)
        }
        let resumed = try decide([
            "Content-Range": "bytes 400-1199/1200", "ETag": "\"\(sha)-gzip\"", "Content-Encoding": "gzip",
            "Repr-Digest": gzipDigest,
        ])
        #expect(resumed == .resume(from: 400, promised, gzipSource))
        for headers in [
            ["Content-Range": "bytes 400-1199/1200", "ETag": "\"\(sha)\"", "Content-Encoding": "gzip"],
            ["Content-Range": "bytes 400-1199/1200", "ETag": "\"\(sha)-gzip\""],
            ["Content-Range": "bytes 400-4999/5000", "ETag": "\"\(sha)\""],
            ["Content-Range": "bytes 400-1299/1300", "ETag": "\"\(sha)-gzip\"", "Content-Encoding": "gzip"],
        ] {
            guard case .restartFromZero = try decide(headers) else {
                Issue.record("expected a restart for \(headers)")
                continue
            }
        }
        #expect(SnapshotHeaders.entityTag("\"\(sha)-gzip\"")! == (sha, .gzip))
        #expect(SnapshotHeaders.entityTag(" \"\(sha)\" ")! == (sha, .identity))
        #expect(SnapshotHeaders.entityTag("W/\"\(sha)-gzip\"") == nil)
        #expect(SnapshotHeaders.entityTag("\"\(sha)-br\"") == nil)
    }

    @Test func otherStatuses() throws {
        guard
            case .restartFromZero = try ResponsePlan.decide(
                head: head(416, ["Content-Range": "bytes */900"]), resumeFrom: 950,
                partial: ExpectedSnapshot(sha256: sha, size: 1000), url: url)
        else {
            Issue.record("416 to a range request must restart")
            return
        }
        let notFound = #expect(throws: FerryError.self) {
            try ResponsePlan.decide(head: head(404), resumeFrom: nil, partial: nil, url: url)
        }
        #expect(notFound?.code == .notFound)
        let broken = #expect(throws: FerryError.self) {
            try ResponsePlan.decide(head: head(503), resumeFrom: nil, partial: nil, url: url)
        }
        #expect(broken?.code == .network)
    }

    @Test func headerParsers() throws {
        #expect(SnapshotHeaders.contentRange("bytes 0-0/1")! == (0, 0, 1))
        #expect(SnapshotHeaders.contentRange("bytes 5-9/10")! == (5, 9, 10))
        for bad in ["bytes */10", "bytes 9-5/10", "bytes 5-10/10", "items 0-1/2", "bytes -1-2/3", "bytes 1-2", ""] {
            #expect(SnapshotHeaders.contentRange(bad) == nil, "\(bad)")
        }
        #expect(SnapshotHeaders.strongSHA256ETag("\"\(sha.uppercased())\"") == sha)
        #expect(SnapshotHeaders.strongSHA256ETag("\"abc\"") == nil)
        #expect(try SnapshotHeaders.reprDigestSHA256("sha-512=:AAAA:, sha-256=:\(base64(sha)):") == sha)
        #expect(try SnapshotHeaders.reprDigestSHA256("md5=:AAAA:") == nil)
        #expect(throws: FerryError.self) { try SnapshotHeaders.reprDigestSHA256("sha-256=:notbase64:") }
        #expect(SnapshotHeaders.nonNegative("12") == 12)
        #expect(SnapshotHeaders.nonNegative("-1") == nil)
        #expect(SnapshotHeaders.nonNegative("1e3") == nil)
    }

    @Test func applyNeverLeavesTheLiveFileMissing() {
        // The live file is linked to previous.db before it is replaced, and replaced by one rename.
        #expect(ClientDirectory.applyPlan(hasDatabase: true) == [.linkLiveToTemp, .replacePrevious, .installUpdate])
        #expect(ClientDirectory.applyPlan(hasDatabase: false) == [.installUpdate])
    }

    @Test func refusedChecksumsFollowTheAcceptedSchemas() {
        var state = ClientStateFile()
        state.refuse(SnapshotInfo(sha256: sha, version: 2, schemaVersion: 2, dataset: "x"), reason: .schema)
        state.refuse(SnapshotInfo(sha256: other, version: 3, schemaVersion: 1, dataset: "x"), reason: .rollback)
        #expect(state.refusedChecksums(accepts: { $0 == 1 }) == [sha, other])
        // Once the app accepts schema 2, that snapshot is wanted again; a rolled-back one stays refused.
        #expect(state.refusedChecksums(accepts: { _ in true }) == [other])
    }
}
