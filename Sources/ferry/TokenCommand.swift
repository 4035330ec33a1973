import ArgumentParser
import FerryCore
import FerryPostgres
import Foundation

/// `ferry token inspect TOKEN [--config template.yml]`: a JWT's header and claims, decoded without verification,
/// and the scope a template would give it: the first thing to run when a user says "I see nothing"
/// (docs/access-rights.md).
struct TokenCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "token",
        abstract: "Look inside access tokens.",
        subcommands: [Inspect.self])

    struct Inspect: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract:
                "Print a JWT's header and claims (not verified) and the scope each --config template would give it.")

        @Argument(help: ArgumentHelp("The token, or - to read it from standard input.", valueName: "token"))
        var token: String

        @Option(
            name: .long,
            help: ArgumentHelp(
                "A template whose scope the token is checked against (repeatable), e.g. templates/trips.yml.",
                valueName: "file"))
        var config: [String] = []

        func run() throws {
            let token = try readToken()
            let templates = try config.map { try Template.load(path: $0) }
            print(try TokenReport(token: token, templates: templates, now: Date()).text)
        }

        func readToken() throws -> String {
            var text = token
            if token == "-" {
                text = String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
            }
            text = text.trimmingCharacters(in: .whitespacesAndNewlines)
            if text.lowercased().hasPrefix("bearer ") {
                text = String(text.dropFirst(7)).trimmingCharacters(in: .whitespaces)
            }
            guard !text.isEmpty else { throw ValidationError("the token is empty") }
            return text
        }
    }
}

/// What `ferry token inspect` prints.
struct TokenReport {
    let text: String

    init(token: String, templates: [Template], now: Date) throws {
        var lines: [String] = []
        // Not a JWT: handled below as an opaque token.
        let jwt = try? UnverifiedJWT(token)
        if let jwt {
            lines.append("header (not verified):")
            lines.append(Self.pretty(jwt.headerJSON))
            lines.append("claims (not verified):")
            lines.append(Self.pretty(jwt.claimsJSON))
            for (name, label) in [("exp", "expires"), ("nbf", "not before"), ("iat", "issued")] {
                guard let date = jwt.claims.date(name) else { continue }
                lines.append("\(label): \(Timestamp.format(date)) (\(Self.relative(date, now: now)))")
            }
            if jwt.claims.date("exp") == nil {
                lines.append("expires: never (no exp claim: Ferry refuses such a token)")
            }
        } else if templates.isEmpty {
            throw FerryError(
                .badInput,
                "this token is not a JWT (three base64url parts, the first a JSON header); an opaque token is checked by a template's `scope.token` query: give --config to see its SHA-256"
            )
        }
        for template in templates {
            lines.append(Self.scopeLine(template, token: token, jwt: jwt))
        }
        text = lines.joined(separator: "\n")
    }

    /// What `template` would make of the token.
    static func scopeLine(_ template: Template, token: String, jwt: UnverifiedJWT?) -> String {
        let name = "dataset '\(template.dataset)'"
        switch template.scope?.check {
        case nil:
            return "\(name): public, no token needed"
        case .token?:
            let hash = FileDigest.sha256Hex(bytes: Array(token.utf8))
            return "\(name): opaque tokens; its scope.token query gets $1 = \(hash)"
        case .claim(let path)?:
            guard let jwt else { return "\(name): needs a JWT (claim \(path)); this token is not one (401)" }
            switch path.scopeValue(in: jwt.claims) {
            case .value(let scope):
                return
                    "\(name): scope '\(scope)' (claim \(path)), if the signature, exp, iss and aud verify and the dataset has that scope (else 403)"
            case .missing:
                return "\(name): no scope, the token has no \(path) claim (403 insufficient_scope)"
            case .notScalar(let kind):
                return "\(name): no scope, the \(path) claim is \(kind), not a string or an integer (403)"
            }
        }
    }

    static func pretty(_ json: Data) -> String {
        // Not JSON: printed as it came.
        guard let object = try? JSONSerialization.jsonObject(with: json),
            let data = try? JSONSerialization.data(
                withJSONObject: object, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])
        else { return String(decoding: json, as: UTF8.self) }
        return String(decoding: data, as: UTF8.self)
    }

    static func relative(_ date: Date, now: Date) -> String {
        let seconds = Int(date.timeIntervalSince(now).rounded())
        // The two largest units: "4m 12s", "2h 5m", "3d 1h".
        var rest = abs(seconds)
        var parts: [String] = []
        for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] where rest >= size || size == 1 {
            if parts.count == 2 || (size == 1 && !parts.isEmpty && rest == 0) { break }
            parts.append("\(rest / size)\(unit)")
            rest %= size
        }
        let span = parts.joined(separator: " ")
        return seconds >= 0 ? "in \(span)" : "\(span) ago"
    }
}
