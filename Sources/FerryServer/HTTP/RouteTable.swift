import HTTPTypes

/// The registered path patterns and their methods, so an existing path with another method answers 405 with
/// `Allow` instead of Hummingbird's 404.
struct RouteTable: Sendable {
    private var routes: [(segments: [Substring], methods: Set<HTTPRequest.Method>)] = []

    mutating func add(_ pattern: String, method: HTTPRequest.Method) {
        let segments = pattern.split(separator: "/")
        if let index = routes.firstIndex(where: { $0.segments == segments }) {
            routes[index].methods.insert(method)
        } else {
            routes.append((segments, [method]))
        }
    }

    /// The methods allowed on `path`, empty when no pattern matches it (`{name}` or `:name` matches any one segment).
    func allowedMethods(path: String) -> [HTTPRequest.Method] {
        let segments = path.split(separator: "/")
        var methods = Set<HTTPRequest.Method>()
        for route in routes where route.segments.count == segments.count {
            if zip(route.segments, segments).allSatisfy({ $0.first == "{" || $0.first == ":" || $0 == $1 }) {
                methods.formUnion(route.methods)
            }
        }
        return methods.map { $0 }.sorted { $0.rawValue < $1.rawValue }
    }
}
