import FerryCore

extension Template {
    /// Checks that templates published together are lines of ONE dataset: the same `dataset:`, a distinct
    /// `schemaVersion:` each, and the same `scope:` (values and token SQL, compared as written), so a bearer
    /// token means the same on every line. Each template is checked on its own first (``load(path:)``); this
    /// only compares them. A single template passes. Errors are `.badTemplate`, name the later file in `path`,
    /// the key, and the earlier file in the message.
    ///
    /// ```swift
    /// let v1 = try Template.load(path: "trips.v1.yml"), v2 = try Template.load(path: "trips.v2.yml")
    /// try Template.validateLines([(v1, "trips.v1.yml"), (v2, "trips.v2.yml")])
    /// ```
    public static func validateLines(_ templates: [(template: Template, path: String)]) throws {
        guard let first = templates.first else { return }
        var versions: [Int: String] = [:]
        for (template, path) in templates {
            guard template.dataset == first.template.dataset else {
                throw FerryError(
                    .badTemplate,
                    "dataset '\(template.dataset)' differs from '\(first.template.dataset)' of \(first.path); templates published together are schema lines of one dataset: give them the same `dataset:`",
                    path: path, key: "dataset")
            }
            if let other = versions[template.schemaVersion] {
                throw FerryError(
                    .badTemplate,
                    "schemaVersion \(template.schemaVersion) is also the schemaVersion of \(other); each line of dataset '\(template.dataset)' needs its own schemaVersion",
                    path: path, key: "schemaVersion")
            }
            versions[template.schemaVersion] = path
            guard template.partition == first.template.partition else {
                throw FerryError(
                    .badTemplate,
                    "the `partition:` section differs from \(first.path)'s; the lines of one dataset share one partitioning: copy the section",
                    path: path, key: "partition")
            }
            guard template.scope == first.template.scope else {
                let what =
                    switch (template.scope, first.template.scope) {
                    case (nil, _), (_, nil): "one has `scope:` and the other not"
                    case (let a?, let b?) where a.values != b.values: "their `scope.values` differ"
                    case (let a?, let b?) where a.token != nil && b.token != nil: "their `scope.token` queries differ"
                    default: "their token checks (`scope.token` or `scope.claim`) differ"
                    }
                throw FerryError(
                    .badTemplate,
                    "the scope differs from \(first.path)'s (\(what)); the lines of one dataset share one access scope: copy the `scope:` section",
                    path: path, key: "scope")
            }
        }
    }
}
