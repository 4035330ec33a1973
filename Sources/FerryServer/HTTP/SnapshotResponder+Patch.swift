import FerryCore
import Hummingbird

extension SnapshotResponder {
    /// `GET|HEAD /v1/datasets/{dataset}/patches/{from}-{to}`: a retained version's patch from an older version,
    /// answered from the caller's own view like a version URL (conditional requests, ranges, immutable caching;
    /// `private` on a scoped dataset). A patch the view does not have is 404, whatever the reason.
    func patch(_ request: Request, context: some RequestContext) async throws -> Response {
        try await respond(to: request, context: context) { try Self.patchTarget(context) }
    }

    /// The `{from}-{to}` of a patch URL: 400 when the pair is malformed.
    static func patchTarget(_ context: some RequestContext) throws -> ReadTarget {
        try ReadTarget.parsePatch(context.parameters.get("patch") ?? "")
    }
}
