import Testing

@testable import FerryPostgres

/// `:scope` substitution in template SQL.
@Suite struct ScopeSQLTests {
    @Test(":scope is found outside literals, quoted names, comments and casts only")
    func placeholder() {
        let expr = "X"
        #expect(ScopeSQL.substitute("tier <= :scope", with: expr) == "tier <= X")
        #expect(ScopeSQL.substitute("a = ':scope' AND b = :scope", with: expr) == "a = ':scope' AND b = X")
        #expect(
            ScopeSQL.substitute("\":scope\" = :scope -- :scope\n/* :scope */", with: expr)
                == "\":scope\" = X -- :scope\n/* :scope */")
        #expect(
            ScopeSQL.substitute("x::scope = $1 AND y = :scoped AND z = $$:scope$$", with: expr)
                == "x::scope = $1 AND y = :scoped AND z = $$:scope$$")
        #expect(ScopeSQL.substitute("E'it\\'s :scope' = :scope", with: expr) == "E'it\\'s :scope' = X")
        #expect(!ScopeSQL.usesScope("SELECT 1") && ScopeSQL.usesScope("x=:scope"))
    }
}
