# scripts/bench jwt [SECONDS]: 304 revalidations per second of a scoped dataset's snapshot (wrk -t2 -c64,
# If-None-Match) with a JWT (RS256, then ES256) against an opaque token, same run, same server, same scope.
# A JWT is verified once and its scope remembered until its exp, so the target is >= 0.9x the opaque figure.
# Release build; a private PostgreSQL; the JWKS is a file (`--jwks FILE`), the tokens are signed by Python's
# cryptography. Sourced by scripts/bench after scripts/lib/common.sh.

duration=${1:-10}
case "$duration" in ''|*[!0-9]*) echo "usage: scripts/bench jwt [SECONDS]   (each wrk run, default 10)" >&2; exit 2 ;; esac

ferry_install_deps wrk curl python3-cryptography
echo "load average before the run: $(cat /proc/loadavg)"
work=$(mktemp -d /tmp/ferry-bench-jwt.XXXXXX)
ferry_pid=""
cleanup() {
  [ -n "$ferry_pid" ] && kill "$ferry_pid" 2>/dev/null && wait "$ferry_pid" 2>/dev/null || true
  ferry_stop_postgres
  rm -rf "$work"
}
trap cleanup EXIT

bench_build_ferry

say "Starting a private PostgreSQL"
ferry_start_postgres
bench_database
psql "$URL" -q -v ON_ERROR_STOP=1 <<'SQL'
CREATE TABLE notes (id text PRIMARY KEY, team text NOT NULL, body text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now());
INSERT INTO notes (id, team, body) SELECT 'n' || g, CASE WHEN g % 2 = 0 THEN 'red' ELSE 'blue' END, md5(g::text)
FROM generate_series(1, 10000) g;
CREATE TABLE members (token_sha256 text PRIMARY KEY, team text NOT NULL);
INSERT INTO members VALUES (encode(sha256('opaque-red-token'::bytea), 'hex'), 'red');
SQL
for kind in jwt opaque; do
  if [ "$kind" = jwt ]; then check='claim: team'; else check='token: "SELECT team FROM members WHERE token_sha256 = $1"'; fi
  cat >"$work/$kind.yml" <<YAML
dataset: notes-$kind
scope:
  values: "SELECT DISTINCT team FROM notes"
  $check
tables:
  - name: notes
    source: notes
    filter: "team = :scope"
YAML
  "$FERRY" publish --config "$work/$kind.yml" --database-url "$URL" --store "$work/store" >/dev/null
done

say "Making RS256 and ES256 keys, the JWKS and two tokens (team red, 1 hour)"
python3 - "$work" <<'PY'
import base64, json, sys, time
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa, utils
work = sys.argv[1]
b64 = lambda b: base64.urlsafe_b64encode(b).rstrip(b"=").decode()
num = lambda n, size: b64(n.to_bytes(size, "big"))
rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
ec_key = ec.generate_private_key(ec.SECP256R1())
pn, en = rsa_key.public_key().public_numbers(), ec_key.public_key().public_numbers()
jwks = {"keys": [
    {"kty": "RSA", "kid": "rsa-1", "alg": "RS256", "use": "sig", "n": num(pn.n, 256), "e": num(pn.e, 3)},
    {"kty": "EC", "kid": "ec-1", "crv": "P-256", "use": "sig", "x": num(en.x, 32), "y": num(en.y, 32)}]}
json.dump(jwks, open(f"{work}/jwks.json", "w"))
now = int(time.time())
claims = b64(json.dumps({"iss": "https://idp.bench", "aud": "ferry", "team": "red", "iat": now, "exp": now + 3600}).encode())
def token(alg, kid, sign):
    head = b64(json.dumps({"alg": alg, "kid": kid, "typ": "JWT"}).encode())
    return f"{head}.{claims}.{b64(sign(f'{head}.{claims}'.encode()))}"
def es256(data):
    r, s = utils.decode_dss_signature(ec_key.sign(data, ec.ECDSA(hashes.SHA256())))
    return r.to_bytes(32, "big") + s.to_bytes(32, "big")
open(f"{work}/rs256.token", "w").write(token("RS256", "rsa-1", lambda d: rsa_key.sign(d, padding.PKCS1v15(), hashes.SHA256())))
open(f"{work}/es256.token", "w").write(token("ES256", "ec-1", es256))
open(f"{work}/opaque.token", "w").write("opaque-red-token")
PY

say "Starting ferry serve (both templates, --jwks FILE)"
port=$(ferry_free_port)
"$FERRY" serve --store "$work/store" --host 127.0.0.1 --port "$port" --config "$work/jwt.yml" --config "$work/opaque.yml" \
  --database-url "$URL" --jwks "$work/jwks.json" --jwt-issuer https://idp.bench --jwt-audience ferry >"$work/ferry.log" 2>&1 &
ferry_pid=$!
for _ in $(seq 1 100); do curl -sf -o /dev/null "http://127.0.0.1:$port/healthz" && break; sleep 0.1; done

rps() { awk '/Requests\/sec/{print $2}'; }
# run NAME DATASET TOKEN-FILE: the 304/s of that dataset's snapshot with that token, into $NAME_rps.
run() {
  local url="http://127.0.0.1:$port/v1/datasets/$2/snapshot" token etag code
  token=$(cat "$work/$3.token")
  etag=$(curl -sf -o /dev/null -D - -H "Authorization: Bearer $token" "$url" | tr -d '\r' | awk -F': ' 'tolower($1)=="etag"{print $2}')
  code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $token" -H "If-None-Match: $etag" "$url")
  [ "$code" = 304 ] || { echo "expected 304 for $1, got $code" >&2; cat "$work/ferry.log" >&2; exit 1; }
  wrk -t2 -c64 -d2s -H "Authorization: Bearer $token" -H "If-None-Match: $etag" "$url" >/dev/null  # warm-up
  printf -v "${1}_rps" '%s' "$(wrk -t2 -c64 -d"${duration}s" -H "Authorization: Bearer $token" -H "If-None-Match: $etag" "$url" | rps)"
}
say "304 revalidations: wrk -t2 -c64 -d${duration}s, If-None-Match and Authorization"
run opaque notes-opaque opaque
run rs256 notes-jwt rs256
run es256 notes-jwt es256
run opaque2 notes-opaque opaque  # the anchor again, to see the drift of the run

ratio() { python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print(f'{a/b:.2f}' if b else 'n/a')" "$1" "$2"; }
anchor=$(python3 -c "import sys; print((float(sys.argv[1]) + float(sys.argv[2])) / 2)" "$opaque_rps" "$opaque2_rps")
say "Results"
printf '%-44s %12s %10s\n' "" "304/s" "x opaque"
printf '%-44s %12s %10s\n' "anchor: opaque token (before, after)" "$opaque_rps, $opaque2_rps" "1.00"
printf '%-44s %12s %10s\n' "JWT RS256 (verified once, cached until exp)" "$rs256_rps" "$(ratio "$rs256_rps" "$anchor")"
printf '%-44s %12s %10s\n' "JWT ES256" "$es256_rps" "$(ratio "$es256_rps" "$anchor")"
