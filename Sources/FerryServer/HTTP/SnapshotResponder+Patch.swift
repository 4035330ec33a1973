import FerryCore
import Hummingbird

extension SnapshotResponder {
    /// `GET|HEAD /v1/datasets/{dataset}/patches/{from}-{to}`: a retained version's patch from an older version,
    /// answered from the caller's own view like a version URL (conditional requests, ranges, immutable caching;
    /// `private` on a scoped dataset). A patch the view does not have is 404, whatever the reason.
    func patch(_ request: Request, context: some RequestContext) async throws -> Response {
        try await respond(to: request, context: context) {
            try ReadTarget.parsePatch(context.parameters.get("patch") ?? "")
        }
    }

    /// The patch `{from}-{to}` of `{dataset}` in the caller's own view (the object lookup of a patch URL): 400 when
    /// the pair is malformed, 404 when the view has no such patch.
    func patchEntry(_ request: Request, context: some RequestContext) async throws -> VersionEntry {
        let name = try Self.datasetName(context)
        let target = try ReadTarget.parsePatch(context.parameters.get("patch") ?? "")
        let (view, _, dataset) = try await access.view(request, dataset: name)
        return try ReadAnswer.entry(target, in: view, dataset: dataset)
    }
}
