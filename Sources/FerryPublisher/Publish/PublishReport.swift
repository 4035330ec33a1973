/// What a ``Publishing`` other than ``Publisher`` adds to its ``PublishResult`` (``PublishResult/report``), printed by
/// `publish --json` under its own ``key``: FerryBucket's `BucketTransfer` (key `bucket`) says what a publish into a
/// bucket moved. The publisher's module declares the report, so this module names none of them.
///
/// ```swift
/// struct MirrorReport: PublishReport, Equatable {
///     static let key = "mirror"
///     var copied = 0
/// }
/// result.report = MirrorReport(copied: 3)  // publish --json: {…,"mirror":{"copied":3},…}
/// let copied = (result.report as? MirrorReport)?.copied
/// ```
public protocol PublishReport: Encodable, Sendable {
    /// The report's key in `publish --json`; it must not be one of ``PublishResult``'s own keys.
    static var key: String { get }
    /// True when `other` is the same report; ``PublishResult``'s `==` compares reports with it.
    func isEqual(to other: any PublishReport) -> Bool
}

extension PublishReport where Self: Equatable {
    /// Equal when `other` is of the same type and `==`.
    public func isEqual(to other: any PublishReport) -> Bool { (other as? Self) == self }
}

/// A ``PublishReport`` made `Equatable`, so ``PublishResult`` keeps its synthesized `==`.
struct PublishReportBox: Sendable, Equatable {
    let report: any PublishReport

    static func == (lhs: PublishReportBox, rhs: PublishReportBox) -> Bool { lhs.report.isEqual(to: rhs.report) }
}

/// The key a ``PublishReport`` is encoded under.
struct PublishReportKey: CodingKey {
    let stringValue: String
    var intValue: Int? { nil }

    init(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}
