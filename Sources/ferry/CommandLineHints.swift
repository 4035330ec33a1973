import FerryClient
import FerryCore
import FerryPostgres

/// The one place where library errors meet command-line options. The libraries name their own settings
/// (`Configuration.serverURL`, `TrustedCertificates`, the token provider) and never a flag; here an error's code, key
/// or TLS problem becomes a hint naming the option that fixes it, appended to the one line `ferry` prints on stderr.
///
/// ```swift
/// exit(withError: CommandLineHints.adding(to: error))
/// // … the server refused the access token (401): …; pass a valid token with --token TOKEN or the FERRY_TOKEN …
/// ```
enum CommandLineHints {
    /// `error` with the hint for its case appended to its message; any other error unchanged.
    static func adding(to error: any Error) -> any Error {
        guard var ferryError = error as? FerryError, let hint = hint(for: ferryError) else { return error }
        ferryError.message += "; " + hint
        return ferryError
    }

    /// The options that fix `error`, nil when no option does.
    static func hint(for error: FerryError) -> String? {
        if error.code == .unauthorized {
            return "pass a valid token with --token TOKEN or the FERRY_TOKEN environment variable"
        }
        if error.code == .schemaRetired {
            return "pass --accept-schema with a schema version the server still serves"
        }
        switch error.tlsProblem {
        case .untrustedCertificate: return "pass --ca with the CA that signed it"
        case .wrongHost: return "give --server the host name the certificate names"
        case .handshake: return "check --server, and that --ca names the right CA"
        case nil: break
        }
        switch (error.code, error.key) {
        case (.notFound, "dataset"): return "check --server and --dataset"
        case (.badInput, "serverURL"): return "pass the server with --server URL"
        case (.badInput, "dataset"): return "pass the dataset with --dataset NAME"
        case (.noDatabase, _): return "run `ferry fetch --server URL --dataset NAME --dir DIR` once online"
        case (.badTemplate, nil) where error.message.hasPrefix(Template.unreadableFileMessage):
            return "pass the template with --config FILE (the samples are in templates/)"
        default: return nil
        }
    }
}
