import Foundation
import HTTPTypes
import Hummingbird
import ServiceLifecycle

/// The manifest long-poll: `GET /v1/datasets/{d}/manifest` with `If-None-Match` and `Prefer: wait=N` (RFC 7240,
/// N clamped to ``WaitPreference/maxSeconds``) is held until the catalog serves a manifest whose ETag the request
/// does not name, then answered 200 with it; at the deadline it is answered 304, as without the preference. Every
/// answer says `Preference-Applied: wait=N`. A request whose `If-None-Match` does not match (or that has none) is
/// answered at once, as always.
///
/// Waiting costs a suspended task: the request waits on the catalog's ``VersionWaiters``, which a reload that
/// changed the dataset wakes, all waiters at once. The token of a scoped dataset is checked once, before waiting,
/// exactly as without the preference, and the scope found then is the one whose next manifest is sent; a JWT whose
/// `exp` (plus leeway) comes before the deadline ends the wait with 401 `invalid_token` then. Graceful
/// shutdown answers every waiting request 304 at once, so the drain does not wait out the longest poll.
///
/// The channel's fast paths (``ChannelRevalidator``) leave every request with `Prefer` to the router, so a waiting
/// request never gets an immediate 304 there.
///
/// ```swift
/// let response = try await ManifestLongPoll.respond(request, dataset: "trips", access: access, wait: wait)
/// ```
enum ManifestLongPoll {
    static func respond(_ request: Request, dataset requested: String, access: DatasetAccess, wait: WaitPreference)
        async throws -> Response
    {
        let waiters = access.catalog.waiters
        let deadline = ContinuousClock.now + .seconds(wait.seconds)
        // A dataset published in schema lines waits on the line the request resolves to now.
        let name = try access.resolve(request, dataset: requested)
        var generation = waiters.generation(name)
        let (first, scope, _) = try await access.viewAndScope(request, dataset: name)
        var view = first
        // A JWT that expires during the wait ends it with 401 (the device then gets a new token).
        let tokenEnd = access.tokenExpiry(request, dataset: name).map {
            ContinuousClock.now + .milliseconds(Int64(max(0, $0.timeIntervalSinceNow) * 1000))
        }
        waiting: while view.manifestNotModified(request.headers) != nil {
            if let tokenEnd, tokenEnd <= ContinuousClock.now, tokenEnd < deadline {
                throw BearerRefusal.invalidToken(.expired)
            }
            let remaining = min(deadline, tokenEnd ?? deadline) - ContinuousClock.now
            guard remaining > .zero else { break }
            let outcome = await withGracefulShutdownHandler {
                await waiters.wait(dataset: name, since: generation, for: remaining)
            } onGracefulShutdown: {
                waiters.shutDown()
            }
            switch outcome {
            case .changed:
                generation = waiters.generation(name)
                view = try access.view(dataset: name, scope: scope)
            case .deadline where tokenEnd.map({ $0 < deadline }) ?? false:
                continue waiting  // the token's end: answered 401 above
            case .deadline, .shutdown:
                break waiting
            }
        }
        var response: Response
        if var fields = view.manifestNotModified(request.headers) {
            fields[.preferenceApplied] = wait.applied
            response = Response(status: .notModified, headers: fields)
        } else {
            var fields = view.manifestHeaders
            fields[.preferenceApplied] = wait.applied
            response = ReadRoutes.json(view.manifestBody, headers: fields)
            if request.method == .head { response = response.createHeadResponse() }
        }
        return response
    }
}
