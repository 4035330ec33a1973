import FerryCore
import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif
#if canImport(Security)
    import Security
#endif

/// The delegate of a ``URLSessionTransport``'s session: hands each data task's bytes and end to the
/// ``URLSessionTaskStream`` registered for it, and, on Apple platforms with a private CA, evaluates the server's
/// certificate against exactly those roots.
/// `@unchecked Sendable`: the table of streams is guarded by `lock`; the anchors never change.
final class URLSessionTransportDelegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    private let lock = NSLock()
    private var streams: [Int: URLSessionTaskStream] = [:]
    #if canImport(Security)
        /// The private CA's certificates, nil to use the system's trust store (the session's default handling).
        private let anchors: [SecCertificate]?
    #endif

    init(trusting ca: TrustedCertificates?) {
        #if canImport(Security)
            anchors = ca.map { $0.derCertificates.compactMap { SecCertificateCreateWithData(nil, $0 as CFData) } }
        #endif
        super.init()
    }

    func register(_ stream: URLSessionTaskStream, for task: URLSessionTask) {
        lock.lock()
        streams[task.taskIdentifier] = stream
        lock.unlock()
    }

    func unregister(_ task: URLSessionTask) {
        lock.lock()
        streams[task.taskIdentifier] = nil
        lock.unlock()
    }

    private func stream(for task: URLSessionTask) -> URLSessionTaskStream? {
        lock.lock()
        defer { lock.unlock() }
        return streams[task.taskIdentifier]
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        stream(for: dataTask)?.received(data, response: dataTask.response)
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: (any Error)?) {
        stream(for: task)?.completed(error, response: task.response)
    }

    #if canImport(Security)
        /// A private CA: the server's chain must lead to one of its certificates (and to no other root), and the
        /// certificate must name the host. A failure is recorded on the task's stream (so the error says untrusted or
        /// wrong host rather than "cancelled") and the connection is refused.
        func urlSession(
            _ session: URLSession, task: URLSessionTask, didReceive challenge: URLAuthenticationChallenge,
            completionHandler: @escaping @Sendable (URLSession.AuthChallengeDisposition, URLCredential?) -> Void
        ) {
            guard let anchors, challenge.protectionSpace.authenticationMethod == NSURLAuthenticationMethodServerTrust,
                let trust = challenge.protectionSpace.serverTrust
            else {
                completionHandler(.performDefaultHandling, nil)
                return
            }
            SecTrustSetPolicies(trust, SecPolicyCreateSSL(true, challenge.protectionSpace.host as CFString))
            SecTrustSetAnchorCertificates(trust, anchors as CFArray)
            SecTrustSetAnchorCertificatesOnly(trust, true)
            var error: CFError?
            if SecTrustEvaluateWithError(trust, &error) {
                completionHandler(.useCredential, URLCredential(trust: trust))
                return
            }
            let hostMismatch = error.map { CFErrorGetCode($0) == Int(errSecHostNameMismatch) } ?? false
            stream(for: task)?.setTLSProblem(hostMismatch ? .wrongHost : .untrustedCertificate)
            completionHandler(.cancelAuthenticationChallenge, nil)
        }
    #endif
}
