import FerryCore
import FerryStore
import Foundation
import Hummingbird
import NIOPosix

/// Who may upload and read attachments of a dataset (docs/http-api.md, "Attachments"):
/// - uploading needs what `POST /changes` needs: on a scoped dataset a bearer token of a scope (401 without);
/// - on a public dataset anyone reads; on a scoped one a token reads an attachment only when its scope's rows name
///   it in a retained version (``AttachmentNames``, cached per scope and manifest revision) or when that token
///   uploaded it; any other token gets 404, exactly as for an attachment not held.
///
/// Attachments are kept per dataset under its base name: the schema lines of a dataset share them.
struct AttachmentAccess: Sendable {
    let access: DatasetAccess
    let store: any AttachmentStore
    let names: AttachmentNamesCache

    /// Who is asking: the dataset (its base name, where attachments live), and the token's hash and scope on a
    /// scoped dataset.
    struct Caller: Sendable {
        let dataset: String
        /// The dataset or line whose retained versions decide what the caller may read.
        let served: String
        let scope: String?
        let tokenHash: String?
        /// On a partitioned dataset with `partition.access`: the streams the token may read (the shared one and its
        /// partitions), whose rows decide what it may read (docs/partitions.md).
        var streams: [String]?
    }

    /// The caller of a request on dataset `name`: 404 for a dataset the server does not serve, 401 (or 503) on a
    /// scoped dataset without a valid token.
    func caller(_ request: Request, dataset name: String) async throws -> Caller {
        let served = try access.resolve(request, dataset: name)
        guard let state = access.catalog.access(served) else { throw SnapshotResponder.unknownDataset(served) }
        let base = DatasetName.base(of: name) ?? name
        switch state {
        case .everyone:
            let token: String? =
                if case .bearer(let token) = DatasetAccess.Credential(request.headers[.authorization]) { token } else {
                    nil
                }
            return Caller(dataset: base, served: served, scope: nil, tokenHash: token.map(TokenScopes.hash))
        case .scoped where access.catalog.partitions(served) != nil:
            // A partitioned dataset: public without `partition.access`; else the token's partitions and the shared
            // stream name what it may read.
            let layout = access.catalog.partitions(served)!.layout
            guard let keys = try await access.readablePartitions(request, dataset: served, layout: layout) else {
                return Caller(dataset: base, served: served, scope: nil, tokenHash: nil)
            }
            let token = try DatasetAccess.bearerToken(request, dataset: served)
            var caller = Caller(
                dataset: base, served: served, scope: PartitionAccess.encode(keys), tokenHash: TokenScopes.hash(token))
            caller.streams = [PartitionLayout.sharedStream] + keys.sorted()
            return caller
        case .scoped:
            let scope = try await access.scope(of: request, dataset: served)
            let token = try DatasetAccess.bearerToken(request, dataset: served)
            return Caller(dataset: base, served: served, scope: scope, tokenHash: TokenScopes.hash(token))
        }
    }

    /// The info of attachment `sha256` when `caller` may read it; nil (404) when it is not held or not theirs.
    func readable(_ sha256: String, by caller: Caller) async throws -> AttachmentInfo? {
        guard let info = try await store.info(dataset: caller.dataset, sha256: sha256) else { return nil }
        guard let scope = caller.scope else { return info }
        if let hash = caller.tokenHash, info.uploaders.contains(hash) { return info }
        for stream in caller.streams ?? [scope] {
            if try await names.names(dataset: caller.served, scope: stream).contains(sha256) { return info }
        }
        return nil
    }
}

/// ``AttachmentNames`` per dataset and scope, recomputed when the dataset's manifest changes (its store revision).
final class AttachmentNamesCache: Sendable {
    let catalog: SnapshotCatalog
    private struct Entry {
        let revision: StoreRevision
        let names: Set<String>
    }
    private let entries = Locked([String: Entry]())

    init(catalog: SnapshotCatalog) {
        self.catalog = catalog
    }

    /// The names scope `scope` of `dataset` (nil: the one scope of a public dataset) may read.
    func names(dataset: String, scope: String?) async throws -> Set<String> {
        guard let revision = catalog.dataset(dataset)?.identity else { return [] }
        let key = dataset + "\u{0}" + (scope ?? "")
        if let hit = entries.withLock({ $0[key] }), hit.revision == revision { return hit.names }
        let store = catalog.store
        let names = try await NIOThreadPool.singleton.runIfActive { () -> Set<String> in
            guard let manifest = try store.storedManifest(for: dataset), let entry = manifest.entry(for: scope) else {
                return []
            }
            return try AttachmentNames.of(entry, in: manifest, store: store)
        }
        entries.withLock { $0[key] = Entry(revision: revision, names: names) }
        return names
    }

    /// Every name any scope of `dataset` retains (for retention); blocking.
    static func allNames(dataset: String, store: any SnapshotStore) throws -> Set<String> {
        guard let manifest = try store.storedManifest(for: dataset) else { return [] }
        var names: Set<String> = []
        for entry in manifest.scopes { names.formUnion(try AttachmentNames.of(entry, in: manifest, store: store)) }
        return names
    }
}
