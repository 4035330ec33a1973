#!/usr/bin/env python3
"""The manifest long-poll under load (issue 25): many devices waiting on one dataset with `Prefer: wait=N`.

  longpoll.py bench --ferry BIN [--waiters 10000] [--duration 10]
      `ferry serve` on a store this script writes. First the anchor: plain revalidations (wrk, 64 connections,
      If-None-Match of the current version) with no waiter, and the server's RSS. Then N connections each wait on the
      manifest (Prefer: wait=60); once the server counts them all (ferry_manifest_waiting_requests), its RSS, and
      the same revalidation load beside them. Then a version is published and the time until every waiter holds it
      is measured, the anchor is measured once more with no waiter (the machine's load moves), and finally SIGTERM,
      with every connection waiting again, which must answer every waiter 304 at once.

  longpoll.py collapse --ferry BIN [--nginx PATH] [--waiters 1000] [--versions 3] [--max-origin 2]
      `ferry serve` behind nginx running deploy/nginx/ferry.conf (only ports and paths filled in). For each version,
      N connections wait through nginx with the same If-None-Match and Prefer; a version is published; every
      waiter must get it, and the origin must have seen at most --max-origin manifest requests for that version
      (counted from its /metrics). Exit status 1 otherwise.

  longpoll.py waiters --port NGINX_PORT --dataset D --replicas PORT,PORT [--count 200] [--wait 60] [--max-origin 2]
                      --ready FILE
      For scripts/scale: N devices wait through the cache at NGINX_PORT on D's manifest (If-None-Match of the
      current one, Prefer: wait=N); once a replica holds nginx's request, FILE is written and the caller publishes.
      Every waiter must get the new version, and the replicas together must have seen at most --max-origin manifest
      requests while they waited (their /metrics). Prints one line; exit status 1 otherwise.

Publishing here writes the store's legacy layout (versions/N.sqlite, N.json, then manifest.json renamed into
place), which `ferry serve` reads as it is: no PostgreSQL is needed.
"""
import argparse
import asyncio
import datetime
import gzip
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time

DATASET = "bench"
MANIFEST = f"/v1/datasets/{DATASET}/manifest"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def publish(root, version, keep=3):
    """Writes version `version` of the dataset (a small SQLite file that differs per version) and renames the new
    manifest.json into place; returns its sha256."""
    versions = os.path.join(root, DATASET, "versions")
    os.makedirs(versions, exist_ok=True)
    path = os.path.join(versions, f"{version}.sqlite")
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE trips(id INTEGER PRIMARY KEY, name TEXT)")
    with db:
        db.executemany("INSERT INTO trips(name) VALUES (?)", [(f"v{version} trip {i}",) for i in range(200)])
    db.close()
    data = open(path, "rb").read()
    sha = hashlib.sha256(data).hexdigest()
    with gzip.open(path + ".gz", "wb") as out:
        out.write(data)
    created = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    record = {"version": version, "sha256": sha, "size": len(data), "gzipSize": os.path.getsize(path + ".gz"),
              "createdAt": created, "schemaVersion": 1, "tables": {"trips": 200}, "dataDigest": "0" * 64}
    json.dump(record, open(os.path.join(versions, f"{version}.json"), "w"), sort_keys=True)
    manifest = dict(record, dataset=DATASET, versions=list(range(max(1, version - keep + 1), version + 1)))
    del manifest["dataDigest"]
    temp = os.path.join(root, DATASET, "manifest.json.tmp")
    with open(temp, "w") as f:
        json.dump(manifest, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.rename(temp, os.path.join(root, DATASET, "manifest.json"))
    return sha


class Server:
    """`ferry serve` on a free port, stopped by its PID."""

    def __init__(self, ferry, store, work):
        self.port = free_port()
        self.log = open(os.path.join(work, "ferry.log"), "w")
        self.process = subprocess.Popen(
            [ferry, "serve", "--store", store, "--host", "127.0.0.1", "--port", str(self.port)],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.process.poll() is not None:
                    break
                time.sleep(0.05)
        raise SystemExit(f"ferry serve did not start: {open(self.log.name).read()[-2000:]}")

    def rss_mb(self):
        for line in open(f"/proc/{self.process.pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def metrics(port):
    """The server's /metrics as {line name with labels: value}."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    body = data.split(b"\r\n\r\n", 1)[1].decode()
    values = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


def waiting(port):
    return int(metrics(port).get("ferry_manifest_waiting_requests", 0))


def origin_manifest_requests(port):
    return int(sum(v for k, v in metrics(port).items()
                   if k.startswith("ferry_http_requests_total") and 'route="/v1/datasets/{dataset}/manifest"' in k))


async def await_condition(check, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        value = await asyncio.to_thread(check)
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.05)


class Waiter:
    """One keep-alive connection that long-polls the manifest."""

    def __init__(self, port, path=MANIFEST):
        self.port = port
        self.path = path
        self.reader = self.writer = None

    async def connect(self):
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)

    async def send(self, sha, wait):
        self.writer.write((f"GET {self.path} HTTP/1.1\r\nHost: 127.0.0.1\r\nIf-None-Match: \"{sha}\"\r\n"
                           f"Prefer: wait={wait}\r\n\r\n").encode())
        await self.writer.drain()

    async def response(self):
        """(status, headers, body) of the next response."""
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        body = await self.reader.readexactly(length) if length else b""
        return status, headers, body

    def close(self):
        if self.writer:
            self.writer.close()


async def open_waiters(port, count, path=MANIFEST):
    waiters = [Waiter(port, path) for _ in range(count)]
    for start in range(0, count, 500):  # in batches: the listen backlog is finite
        await asyncio.gather(*(w.connect() for w in waiters[start:start + 500]))
    return waiters


def wrk_rate(port, sha, duration, connections=64):
    """Plain revalidations per second (all 304), with wrk."""
    out = subprocess.run(
        ["wrk", "-t2", f"-c{connections}", f"-d{duration}s", "-H", f"If-None-Match: \"{sha}\"",
         f"http://127.0.0.1:{port}{MANIFEST}"], capture_output=True, text=True, check=True).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return rate, out if non2xx else None


async def bench(args):
    work = tempfile.mkdtemp(prefix="ferry-longpoll-")
    store = os.path.join(work, "store")
    server = None
    try:
        sha = publish(store, 1)
        server = Server(args.ferry, store, work)
        await asyncio.to_thread(wrk_rate, server.port, sha, 2)  # warm up
        anchor_rss = server.rss_mb()
        anchor_rate, _ = await asyncio.to_thread(wrk_rate, server.port, sha, args.duration)
        print(f"anchor (no waiter): {anchor_rate:,.0f} revalidations/s (304), server RSS {anchor_rss:.1f} MB", flush=True)

        waiters = await open_waiters(server.port, args.waiters)
        start = time.monotonic()
        await asyncio.gather(*(w.send(sha, 60) for w in waiters))
        await await_condition(lambda: waiting(server.port) == args.waiters, 120, f"{args.waiters} waiting requests")
        waiting_rss = server.rss_mb()
        print(f"{args.waiters:,} waiting connections registered in {time.monotonic() - start:.1f} s; server RSS {waiting_rss:.1f} MB "
              f"(+{waiting_rss - anchor_rss:.1f} MB, {(waiting_rss - anchor_rss) * 1024 / args.waiters:.1f} KiB per waiter)", flush=True)
        rate, _ = await asyncio.to_thread(wrk_rate, server.port, sha, args.duration)
        print(f"beside them: {rate:,.0f} revalidations/s (304), {rate / anchor_rate:.2f}x the anchor; "
              f"server RSS {server.rss_mb():.1f} MB", flush=True)
        if waiting(server.port) != args.waiters:
            raise SystemExit("waiters were answered during the revalidation load")

        # A version lands: every waiter gets it
        published = time.monotonic()
        sha2 = await asyncio.to_thread(publish, store, 2)
        answers = await asyncio.gather(*(w.response() for w in waiters))
        woke = time.monotonic() - published
        got = sum(1 for status, headers, _ in answers if status == 200 and headers.get("ferry-version") == "2")
        print(f"a version published: {got:,}/{args.waiters:,} waiters answered 200 with it within {woke:.2f} s of the publish "
              f"(the catalog polls every second)", flush=True)
        if got != args.waiters:
            raise SystemExit("not every waiter got the new version")
        # The anchor again, now that no request waits: the machine's load moves between runs (other builds).
        after_rate, _ = await asyncio.to_thread(wrk_rate, server.port, sha2, args.duration)
        print(f"anchor again (waiters answered, none waiting): {after_rate:,.0f} revalidations/s (304); "
              f"beside the waiters: {rate / ((anchor_rate + after_rate) / 2):.2f}x the mean of both anchors", flush=True)

        # Shutdown answers every waiter at once
        await asyncio.gather(*(w.send(sha2, 60) for w in waiters))
        await await_condition(lambda: waiting(server.port) == args.waiters, 120, f"{args.waiters} waiting requests again")
        stopping = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        answers = await asyncio.gather(*(w.response() for w in waiters), return_exceptions=True)
        all_answered = time.monotonic() - stopping
        answered = sum(1 for a in answers if not isinstance(a, BaseException) and a[0] == 304)
        await asyncio.to_thread(server.process.wait, 90)
        print(f"SIGTERM: {answered:,}/{args.waiters:,} waiters answered 304 within {all_answered:.2f} s, "
              f"server exited {time.monotonic() - stopping:.2f} s after the signal", flush=True)
        for w in waiters:
            w.close()
        if answered != args.waiters:
            raise SystemExit("not every waiter got a 304 at shutdown")
    finally:
        if server:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


class Nginx:
    """nginx running deploy/nginx/ferry.conf with only its listen port, upstream servers and paths replaced (as the
    Swift tests' NginxInFront and scripts/scale do), stopped by its PID."""

    def __init__(self, nginx, upstream, work, connections):
        root = os.path.join(work, "nginx")
        os.makedirs(root)
        os.chmod(work, 0o777)
        os.chmod(root, 0o777)
        self.port = free_port()
        conf = open(os.path.join(os.path.dirname(__file__), "../../deploy/nginx/ferry.conf")).read()
        for old, new in [("/var/cache/nginx/ferry", f"{root}/cache"), ("listen 8080;", f"listen 127.0.0.1:{self.port};"),
                         ("server 127.0.0.1:8081 ", f"server 127.0.0.1:{upstream} "),
                         ("server 127.0.0.1:8082 ", f"server 127.0.0.1:{upstream} ")]:
            if conf.count(old) != 1:
                raise SystemExit(f"deploy/nginx/ferry.conf: expected '{old}' exactly once")
            conf = conf.replace(old, new)
        open(f"{root}/ferry.conf", "w").write(conf)
        open(f"{root}/nginx.conf", "w").write(f"""
worker_processes 1;
worker_rlimit_nofile {connections * 2 + 256};
pid {root}/nginx.pid;
error_log {root}/error.log warn;
events {{ worker_connections {connections * 2 + 128}; }}
http {{
  access_log off;
  client_body_temp_path {root}/body; proxy_temp_path {root}/proxy; fastcgi_temp_path {root}/fcgi;
  uwsgi_temp_path {root}/uwsgi; scgi_temp_path {root}/scgi;
  include {root}/ferry.conf;
}}
""")
        self.root = root
        self.process = subprocess.Popen([nginx, "-p", root, "-c", f"{root}/nginx.conf", "-g", "daemon off;"],
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 10
        while time.time() < deadline and not os.path.exists(f"{root}/nginx.pid") and self.process.poll() is None:
            time.sleep(0.05)
        if self.process.poll() is not None or not os.path.exists(f"{root}/nginx.pid"):
            log = open(f"{root}/error.log").read() if os.path.exists(f"{root}/error.log") else ""
            raise SystemExit(f"nginx did not start: {log[-1500:]}")

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


async def collapse(args):
    work = tempfile.mkdtemp(prefix="ferry-collapse-")
    store = os.path.join(work, "store")
    server = nginx = None
    failed = False
    try:
        sha = publish(store, 1)
        server = Server(args.ferry, store, work)
        nginx = Nginx(args.nginx, server.port, work, args.waiters)
        waiters = await open_waiters(nginx.port, args.waiters)
        print(f"{args.waiters} devices wait on one dataset through nginx (deploy/nginx/ferry.conf), Prefer: wait={args.wait}", flush=True)
        for version in range(2, args.versions + 2):
            before = await asyncio.to_thread(origin_manifest_requests, server.port)
            await asyncio.gather(*(w.send(sha, args.wait) for w in waiters))
            # The event: nginx's one request waits at the origin
            await await_condition(lambda: waiting(server.port) >= 1, 30, "nginx's request to wait at the origin")
            published = time.monotonic()
            sha = await asyncio.to_thread(publish, store, version)
            answers = await asyncio.gather(*(w.response() for w in waiters))
            elapsed = time.monotonic() - published
            after = await asyncio.to_thread(origin_manifest_requests, server.port)
            got = sum(1 for status, headers, _ in answers if status == 200 and headers.get("ferry-version") == str(version))
            cache = {}
            for _, headers, _ in answers:
                key = headers.get("x-cache-status", "-")
                cache[key] = cache.get(key, 0) + 1
            origin = after - before
            ok = got == args.waiters and origin <= args.max_origin
            failed |= not ok
            print(f"version {version}: {got}/{args.waiters} devices got it within {elapsed:.2f} s of the publish; "
                  f"origin manifest requests: {origin} (limit {args.max_origin}); nginx cache {cache}"
                  + ("" if ok else "  FAILED"), flush=True)
        for w in waiters:
            w.close()
    finally:
        if nginx:
            nginx.stop()
        if server:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    if failed:
        raise SystemExit(1)


async def waiters_through_cache(args):
    """scripts/scale's waiting devices: see the module's doc."""
    path = f"/v1/datasets/{args.dataset}/manifest"
    replicas = [int(p) for p in args.replicas.split(",")]
    probe = Waiter(args.port, path)
    await probe.connect()
    probe.writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    await probe.writer.drain()
    status, headers, _ = await probe.response()
    probe.close()
    if status != 200:
        raise SystemExit(f"GET {path} through the cache answered {status}")
    sha, current = headers["etag"].strip('"'), int(headers["ferry-version"])
    waiters = await open_waiters(args.port, args.count, path)

    def origin():
        return sum(origin_manifest_requests(p) for p in replicas)

    def held():
        return sum(waiting(p) for p in replicas) >= 1

    before = await asyncio.to_thread(origin)
    await asyncio.gather(*(w.send(sha, args.wait) for w in waiters))
    await await_condition(held, 30, "nginx's request to wait at a replica")
    open(args.ready, "w").write("ready\n")
    ready = time.monotonic()
    answers = await asyncio.wait_for(asyncio.gather(*(w.response() for w in waiters)), args.wait + 30)
    elapsed = time.monotonic() - ready
    after = await asyncio.to_thread(origin)
    for w in waiters:
        w.close()
    versions = [int(h.get("ferry-version", "0")) for status, h, _ in answers if status == 200]
    got = sum(1 for v in versions if v > current)
    new = max(versions, default=current)
    ok = got == args.count and after - before <= args.max_origin
    print(f"waiting devices: {got}/{args.count} waiting through nginx got version {new} within {elapsed:.2f} s; "
          f"origin manifest requests for it: {after - before} from 1 cache (limit {args.max_origin})"
          + ("" if ok else "  FAILED"), flush=True)
    if not ok:
        raise SystemExit(1)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    b = sub.add_parser("bench")
    b.add_argument("--ferry", required=True)
    b.add_argument("--waiters", type=int, default=10000)
    b.add_argument("--duration", type=int, default=10)
    c = sub.add_parser("collapse")
    c.add_argument("--ferry", required=True)
    c.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    c.add_argument("--waiters", type=int, default=1000)
    c.add_argument("--versions", type=int, default=3)
    c.add_argument("--wait", type=int, default=30)
    c.add_argument("--max-origin", type=int, default=2)
    w = sub.add_parser("waiters")
    w.add_argument("--port", type=int, required=True)
    w.add_argument("--dataset", required=True)
    w.add_argument("--replicas", required=True)
    w.add_argument("--count", type=int, default=200)
    w.add_argument("--wait", type=int, default=60)
    w.add_argument("--max-origin", type=int, default=2)
    w.add_argument("--ready", required=True)
    args = parser.parse_args()
    modes = {"bench": bench, "collapse": collapse, "waiters": waiters_through_cache}
    asyncio.run(modes[args.mode](args))


if __name__ == "__main__":
    main()
