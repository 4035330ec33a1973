import FerryCore
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// Content-addressed objects, for a shared cache in front of the replicas (docs/deploy.md, "Scoped datasets
/// through a shared cache"):
///
/// - `GET|HEAD /v1/datasets/{dataset}/objects/{object}` answers one stored representation by its name
///   (``ObjectName``), with the same headers as the version or patch URL that serves it (without `Vary`: the
///   name fixes the representation). A caller reads only objects its own view retains: on a scoped dataset, an
///   object of another scope is 404 like one that never existed.
/// - `GET|HEAD /v1/datasets/{dataset}/versions/{version}/object` and `/patches/{from}-{to}/object` (the object
///   lookup) name the object that request would be answered with, in `Ferry-Object`, after the same token
///   check and the same choice of representation (``select(_:entry:)``); nginx's `auth_request` asks it before
///   serving a cached object, so a request without a valid token for the scope gets no byte from the cache. It
///   also sends the object's `ETag`, `Cache-Control` and `Repr-Digest` (`Ferry-Object-ETag`, …), which nginx
///   sends with the object, and with ``ServerDependencies/objectURL`` (a bucket store, `--presign-objects`) a
///   presigned URL of the object in the bucket (`Ferry-Object-URL`), which nginx fills its cache from.
///
/// Both answer with the dataset's own `Cache-Control`: `private` on a scoped dataset, so a cache that only honours
/// `Cache-Control` keeps none of it; the lookup is `no-store`.
extension SnapshotResponder {
    func object(_ request: Request, context: some RequestContext) async throws -> Response {
        try await respond(to: request, context: context) {
            try ReadTarget.parseObject(context.parameters.get("object") ?? "")
        }
    }

    /// The object lookup of a version URL (`patch: false`) or a patch URL (`patch: true`).
    func objectLookup(_ request: Request, context: some RequestContext, patch: Bool) async throws -> Response {
        let name = try Self.datasetName(context)
        let entry = try await self.entry(request, context: context, patch: patch)
        let selected = patch ? entry.identity : Self.select(request, entry: entry)
        let lookup = ObjectLookup(
            dataset: name, version: entry.version, object: selected.object.description,
            url: "/v1/datasets/\(name)/objects/\(selected.object)", etag: selected.etag, size: selected.size)
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        // The answer depends on the token and on Accept-Encoding, Range and If-Range: no cache keeps it.
        headers[.cacheControl] = "no-store"
        headers[.ferryObject] = lookup.object
        headers[.ferryVersion] = String(entry.version)
        headers[.ferryObjectETag] = selected.etag
        headers[.ferryObjectCacheControl] = selected.objectHeaders[.cacheControl]
        headers[.ferryObjectReprDigest] = selected.objectHeaders[.reprDigest]
        // Only an object of the store is in the bucket: a version built from steps and a catch-up patch are this
        // server's own, which nginx then fills its cache from.
        if let objectURL, entry.inStore { headers[.ferryObjectURL] = objectURL(name, lookup.object) }
        let body = ByteBuffer(bytes: try Self.lookupEncoder.encode(lookup))
        let response = Response(status: .ok, headers: headers, body: .init(byteBuffer: body))
        return request.method == .head ? response.createHeadResponse() : response
    }

    static let lookupEncoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()
}

/// The body of an object lookup: which object a version or patch URL answers this request with.
struct ObjectLookup: Codable, Equatable, Sendable {
    var dataset: String
    /// `Ferry-Version` of the answer (the patch's target version for a patch).
    var version: Int
    /// The object's name, as in `/objects/{object}`.
    var object: String
    /// `/v1/datasets/{dataset}/objects/{object}`.
    var url: String
    /// The object's strong ETag, the one the version URL would send.
    var etag: String
    /// Its size in bytes.
    var size: Int64
}
