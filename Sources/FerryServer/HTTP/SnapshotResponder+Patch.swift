import FerryCore
import Hummingbird

extension SnapshotResponder {
    /// `GET|HEAD /v1/datasets/{dataset}/patches/{from}-{to}`: a retained version's patch from an older version,
    /// answered from the caller's own view like a version URL (conditional requests, ranges, immutable caching;
    /// `private` on a scoped dataset). A patch the view does not have is 404, whatever the reason.
    func patch(_ request: Request, context: some RequestContext) async throws -> Response {
        try respond(to: request, entry: try await patchEntry(request, context: context), cacheControlLatest: false)
    }

    /// The patch `{from}-{to}` of `{dataset}` in the caller's own view (the patch URL and its object lookup): 400
    /// when the pair is malformed, 404 when the view has no such patch.
    func patchEntry(_ request: Request, context: some RequestContext) async throws -> VersionEntry {
        let name = try Self.datasetName(context)
        let text = context.parameters.get("patch") ?? ""
        guard let key = PatchKey(text) else {
            throw ServerError(
                .badRequest, code: .badInput,
                "patch '\(text.prefix(40))' is malformed: use FROM-TO, two version numbers without leading zeros, FROM below TO"
            )
        }
        let (view, _) = try await access.view(request, dataset: name)
        guard let entry = view.patches[key] else {
            let available = view.patches.keys.filter { $0.to == view.manifest.version }.map(\.from).sorted().map(
                String.init
            ).joined(separator: ", ")
            throw ServerError(
                .notFound, code: .notFound,
                "dataset '\(name)' has no patch from version \(key.from) to \(key.to) (patches to the latest version \(view.manifest.version) start at: \(available.isEmpty ? "none" : available)); fetch the full snapshot"
            )
        }
        return entry
    }
}
