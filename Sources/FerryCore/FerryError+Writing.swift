import Foundation

extension FerryError.Code {
    /// A write failed because the disk is full.
    public static let diskFull = Self("disk-full")
}

extension FerryError {
    /// Whether `error` (from Foundation's file APIs or a POSIX call) says the file system is out of space.
    public static func isOutOfSpace(_ error: any Error) -> Bool {
        if let ferry = error as? FerryError {
            return ferry.code == .diskFull || ferry.message.contains("the disk is full")
        }
        let ns = error as NSError
        if ns.domain == NSCocoaErrorDomain && ns.code == CocoaError.fileWriteOutOfSpace.rawValue { return true }
        if ns.domain == NSPOSIXErrorDomain && ns.code == Int(POSIXError.Code.ENOSPC.rawValue) { return true }
        if let underlying = ns.userInfo[NSUnderlyingErrorKey] as? NSError { return isOutOfSpace(underlying) }
        return false
    }

    /// A ``Code/diskFull`` error naming `url` when `error` is out of space (`"<what>: the disk is full; <fix>"`), else
    /// an I/O error naming it with the system's reason.
    public static func writing(_ error: any Error, _ what: String, _ url: URL, fix: String) -> FerryError {
        if isOutOfSpace(error) {
            return FerryError(.diskFull, "\(what): the disk is full; \(fix)", path: url.path)
        }
        return FerryError(.io, "\(what): \((error as NSError).localizedDescription)", path: url.path)
    }
}
