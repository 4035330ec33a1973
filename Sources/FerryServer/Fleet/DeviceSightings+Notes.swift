import FerryCore
import Foundation
import HTTPTypes

/// The notes each route adds for the fleet (``DeviceFleet``); each is a no-op without a fleet or a `Ferry-Device`.
extension DeviceSightings {
    /// A read of a snapshot, version or patch URL answered `status`: the version asked for, and, on a 200 or a
    /// 304, the version the device now holds (downloaded in full or by patch, or confirmed current).
    func noteRead(
        _ target: ReadTarget, status: HTTPResponse.Status, latest: Int, headers: HTTPFields, dataset: String,
        now: Date = Date()
    ) {
        guard let id = headers[.ferryDevice] else { return }
        let version: Int
        let how: String
        switch target {
        case .snapshot: (version, how) = (latest, "full")
        case .version(let number): (version, how) = (number, "full")
        case .patch(let key): (version, how) = (key.to, "patch")
        case .manifest, .object: return
        }
        var note = DeviceNote(lastSeen: now)
        note.askedVersion = version
        if status == .ok || status == .notModified {
            note.heldVersion = version
            note.heldHow = status == .notModified ? "current" : how
            note.heldAt = now
        }
        self.note(id: id, dataset: dataset, note)
    }

    /// A push merged: its answers' counts.
    func notePush(headers: HTTPFields, dataset: String, results: [ChangeResult], now: Date = Date()) {
        var note = DeviceNote(lastSeen: now)
        note.push = DeviceNote.Push(results)
        note.pushAt = now
        self.note(id: headers[.ferryDevice], dataset: dataset, note)
    }

    /// The scope a device's token maps to.
    func noteScope(headers: HTTPFields, dataset: String, scope: String, now: Date = Date()) {
        var note = DeviceNote(lastSeen: now)
        note.scope = scope
        self.note(id: headers[.ferryDevice], dataset: dataset, note)
    }

    /// An error the server answered a request under `/v1/datasets/{dataset}/`, for a dataset it `serves`.
    func noteError(
        headers: HTTPFields, path: String, status: HTTPResponse.Status, serves: (String) -> Bool, now: Date = Date()
    ) {
        guard status.code >= 400, let id = headers[.ferryDevice] else { return }
        let parts = path.split(separator: "/", omittingEmptySubsequences: true)
        guard parts.count >= 3, parts[0] == "v1", parts[1] == "datasets", DatasetName.isValid(String(parts[2])),
            serves(String(parts[2]))
        else { return }
        var note = DeviceNote(lastSeen: now)
        note.errorStatus = status.code
        note.errorCode = status.reasonPhrase
        note.errorAt = now
        self.note(id: id, dataset: String(parts[2]), note)
    }
}
