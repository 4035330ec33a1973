// `ferry-sigv4`: signs requests described as JSON on stdin with FerryS3's SigV4 and prints the result as JSON, so
// scripts/lib/sigv4_check.py can compare it with botocore's signer. A test tool, in no product.
//
// Input: a JSON array of cases {id, method, path, query: [[k, v]], headers: [[k, v]], payload: "body" | "unsigned" |
// "trailer", body (base64), accessKey, secretKey, token?, region, time (seconds since 1970), presignExpires?}.
// Output: a JSON array of {id, headers: [[k, v]]} (or {id, query: [[k, v]]} for a presigned URL).
import FerryS3
import Foundation

struct Case: Decodable {
    var id: Int
    var method: String
    var path: String
    var query: [[String]]
    var headers: [[String]]
    var payload: String
    var body: String
    var accessKey: String
    var secretKey: String
    var token: String?
    var region: String
    var time: Double
    var presignExpires: Int?
}

struct Signed: Encodable {
    var id: Int
    var headers: [[String]]?
    var query: [[String]]?
}

func pairs(_ lists: [[String]]) -> [(String, String)] { lists.map { ($0[0], $0.count > 1 ? $0[1] : "") } }

let input = FileHandle.standardInput.readDataToEndOfFile()
let cases = try JSONDecoder().decode([Case].self, from: input)
var out: [Signed] = []
for c in cases {
    let signer = SigV4(
        credentials: S3Credentials(accessKeyID: c.accessKey, secretAccessKey: c.secretKey, sessionToken: c.token),
        region: c.region)
    let date = Date(timeIntervalSince1970: c.time)
    if let expires = c.presignExpires {
        let host = pairs(c.headers).first { $0.0.lowercased() == "host" }?.1 ?? ""
        let items = signer.presign(
            method: c.method, path: c.path, query: pairs(c.query), host: host, expires: expires, date: date)
        out.append(Signed(id: c.id, query: items.map { [$0.0, $0.1] }))
        continue
    }
    let payload: PayloadHash
    switch c.payload {
    case "unsigned": payload = .unsigned
    case "trailer": payload = .streamingUnsignedTrailer
    default:
        guard let body = Data(base64Encoded: c.body) else {
            FileHandle.standardError.write(Data("case \(c.id): body is not base64\n".utf8))
            exit(2)
        }
        payload = .of(body)
    }
    let added = signer.sign(
        method: c.method, path: c.path, query: pairs(c.query), headers: pairs(c.headers), payload: payload, date: date)
    out.append(Signed(id: c.id, headers: added.map { [$0.0, $0.1] }))
}
FileHandle.standardOutput.write(try JSONEncoder().encode(out))
