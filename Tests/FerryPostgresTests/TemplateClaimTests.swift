import FerryCore
import FerryPostgres
import Foundation
import Testing

/// `scope: {values: …, claim: …}` (issue 51): parsing, its errors, and how a claim path reads a token's claims.
@Suite struct TemplateClaimTests {
    static func template(_ scope: String) throws -> Template {
        try Template.parse(
            yaml:
                "dataset: d\nscope:\n\(scope)\ntables:\n  - name: t\n    primaryKey: id\n    filter: \"team = :scope\"\n",
            path: "x.yml")
    }

    static func failure(_ scope: String) -> FerryError? {
        do {
            _ = try template(scope)
            return nil
        } catch {
            return error as? FerryError
        }
    }

    @Test("a claim or a claim path parses; token and claim together, neither, or a bad path fail naming the key")
    func parses() throws {
        let scope = try #require(try Self.template("  values: [red, blue]\n  claim: realm_access.team").scope)
        #expect(scope.claim?.components == ["realm_access", "team"] && scope.token == nil)
        #expect(scope.check == .claim(try #require(ClaimPath("realm_access.team"))))
        let both = Self.failure("  values: [a]\n  claim: team\n  token: \"SELECT 1 WHERE $1 = ''\"")
        #expect(both?.key == "scope.claim" && both?.message.contains("not both") == true)
        let neither = Self.failure("  values: [a]")
        #expect(neither?.key == "scope.token" && neither?.message.contains("`claim`") == true)
        let bad = Self.failure("  values: [a]\n  claim: \"realm_access..team\"")
        #expect(bad?.key == "scope.claim" && bad?.message.contains("not a claim path") == true)
    }

    @Test("a claim path reads strings and integers as scope values, and says what else it found")
    func claimValues() throws {
        let claims = try JSONDecoder().decode(
            ClaimValue.self,
            from: Data(
                #"{"team":"red","tier":7,"big":3.0,"frac":1.5,"flag":true,"list":["a"],"realm_access":{"team":"blue"},"nil":null}"#
                    .utf8))
        func value(_ path: String) throws -> ClaimPath.Outcome { try #require(ClaimPath(path)).scopeValue(in: claims) }
        #expect(try value("team") == .value("red"))
        #expect(try value("tier") == .value("7"))
        #expect(try value("big") == .value("3"))
        #expect(try value("realm_access.team") == .value("blue"))
        #expect(try value("frac") == .notScalar("a fractional number"))
        #expect(try value("flag") == .notScalar("a boolean"))
        #expect(try value("list") == .notScalar("an array"))
        #expect(try value("realm_access") == .notScalar("an object"))
        #expect(try value("nil") == .missing && value("absent") == .missing && value("team.x") == .missing)
    }

    @Test("an unverified JWT decodes its header and claims; anything else is bad input naming the part")
    func decodes() throws {
        let jwt = try UnverifiedJWT("eyJhbGciOiJSUzI1NiIsImtpZCI6ImsxIn0.eyJ0ZWFtIjoicmVkIiwiZXhwIjoxMDB9.c2ln")
        #expect(jwt.header.string("alg") == "RS256" && jwt.header.string("kid") == "k1")
        #expect(jwt.claims.string("team") == "red" && jwt.claims.date("exp") == Date(timeIntervalSince1970: 100))
        for (token, words) in [
            ("opaque-token", "three parts"), ("a.b", "three parts"), ("e30.!!!.x", "base64url"),
            ("bm90IGpzb24.e30.x", "header is not a JSON object"), ("e30.WzFd.x", "claims are not a JSON object"),
        ] {
            #expect(throws: FerryError.self) { try UnverifiedJWT(token) }
            do {
                _ = try UnverifiedJWT(token)
            } catch let error as FerryError {
                #expect(error.code == .badInput && error.message.contains(words), "\(token): \(error.message)")
            }
        }
    }
}
