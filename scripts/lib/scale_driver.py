"""Simulated devices and the figures of scripts/scale (Python stdlib only; every device is the real `ferry` CLI).

  scale_driver.py wave    --ferry F --server URL --store DIR --dataset D --root DIR --devices N --concurrency C
                          --phase initial|update [--tokens 0=t0,1=t1,...] [--cut K] [--kill-pid PID --kill-at F
                          --kill-metrics URL] --out FILE
      N devices, C at a time, each in its own directory ROOT/dev-I. initial: `ferry fetch` must install the version
      the store's manifest names. update: `ferry fetch` must download it as updated.db, whose SHA-256 the driver
      checks itself (byte-identical to the published file), then `ferry apply`. K of the update's devices are cut
      midway (--limit-rate, kill -9 once half the gzip copy arrived) and fetch again, which must resume
      (resumedFrom > 0). With --kill-pid, that process (a replica) gets kill -9 once F of the devices are done, after
      its /metrics were saved. A device gets at most 3 attempts; one that never succeeds is failed.
  scale_driver.py verify  --store DIR --dataset D --root DIR [--tokens ...] [--sample N] --out FILE
      Every device's live database.db (which carries the client's outbox triggers, so its bytes differ) holds
      exactly the published snapshot's rows: each table of the published file, compared both ways with EXCEPT.
  scale_driver.py probe   --server URL --store DIR --dataset D --tokens ... [--revoked TOKEN] --out FILE
      Every version, patch and object URL of every scope, asked with each scope's token, no token, an unknown token
      and a revoked one: counts the bytes of any answer that carries an object outside the asking token's scope.
  scale_driver.py report  --store DIR --dataset D --log FILE --log-from BYTES --metrics-before F... --metrics-after
                          F... --waves FILE... --verify FILE [--probe FILE] --label TEXT
      The figures, from nginx's access log (the cache's view), the replicas' /metrics and the devices; checks the
      targets and exits 1 when one is missed.

Every loop is bounded (device count, attempts, timeouts); every URL is on 127.0.0.1.
"""
import collections
import argparse
import concurrent.futures
import gzip
import hashlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import threading
import time
import urllib.error
import urllib.request

ATTEMPTS = 3
FETCH_TIMEOUT = 600


# ---------------------------------------------------------------------------------------------------- the store


def load_manifest(store, dataset):
    with open(os.path.join(store, dataset, "manifest.json"), encoding="utf-8") as f:
        return json.load(f)


def parse_tokens(text):
    """'0=alice-token,1=carol-token' → {'0': 'alice-token', ...}; '' → {None: None} (a public dataset)."""
    if not text:
        return {None: None}
    return dict(pair.split("=", 1) for pair in text.split(","))


def scope_entry(manifest, scope):
    for entry in manifest["scopes"]:
        if entry.get("scope") == scope:
            return entry
    raise SystemExit(f"scope {scope!r} is not in the manifest of {manifest['dataset']}")


def current(manifest, scope):
    """The record a device of `scope` must end with: the scope's newest retained version."""
    return max(scope_entry(manifest, scope)["retained"], key=lambda r: r["version"])


def is_checkpoint(record):
    """Whether the store holds the version's full files (docs/delta.md): records before steps existed all do."""
    return record.get("checkpoint", "step" not in record)


def objects_of(manifest, scope):
    """Every object name a scope may read: its retained snapshots (the store's checkpoints, and the versions a
    server builds from steps), their gzip copies and patches."""
    names = set()
    for record in scope_entry(manifest, scope)["retained"]:
        names |= {record["sha256"] + ".sqlite", record["sha256"] + ".sqlite.gz"}
        names |= {p["sha256"] + ".patch.gz" for p in record.get("patches") or []}
    return names


def published_file(store, dataset, sha256, work=None):
    """The SQLite file of a published version: a checkpoint's object, or the file the publisher built (its work
    directory keeps each scope's current one, `.ferry-work/DATASET/<sha256>.sqlite`)."""
    candidates = [os.path.join(store, dataset, "objects", sha256 + ".sqlite"),
                  os.path.join(store, ".ferry-work", dataset, sha256 + ".sqlite")]
    if work:
        candidates.append(os.path.join(work, ".ferry-work", dataset, sha256 + ".sqlite"))
    return next((c for c in candidates if os.path.exists(c)), candidates[0])


def object_sizes(manifest):
    sizes = {}
    for entry in manifest["scopes"]:
        for record in entry["retained"]:
            sizes[record["sha256"] + ".sqlite"] = record["size"]
            sizes[record["sha256"] + ".sqlite.gz"] = record["gzipSize"]
            for p in record.get("patches") or []:
                sizes[p["sha256"] + ".patch.gz"] = p["size"]
    return sizes


def object_versions(manifest):
    versions = {}
    for entry in manifest["scopes"]:
        for record in entry["retained"]:
            for suffix in (".sqlite", ".sqlite.gz"):
                versions[record["sha256"] + suffix] = (entry.get("scope"), record["version"], suffix)
            for p in record.get("patches") or []:
                versions[p["sha256"] + ".patch.gz"] = (entry.get("scope"), f"{p['from']}-{p['to']}", ".patch.gz")
    return versions


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            chunk = f.read(1 << 20)
            if not chunk:
                return h.hexdigest()
            h.update(chunk)


# ---------------------------------------------------------------------------------------------------- devices


def device_scope(index, tokens):
    scopes = sorted(tokens, key=lambda s: (s is None, s))
    return scopes[index % len(scopes)]


def run_ferry(ferry, args, token, timeout=FETCH_TIMEOUT):
    env = dict(os.environ)
    env.pop("FERRY_TOKEN", None)
    if token:
        env["FERRY_TOKEN"] = token  # not on the command line: other users of the machine could read it there
    return subprocess.run([ferry] + args, capture_output=True, text=True, timeout=timeout, env=env)


def last_json(text):
    for line in reversed(text.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


class Wave:
    def __init__(self, args):
        self.args = args
        # A dataset in schema lines: the devices ask for the dataset with --accept-schema, and must get --line's files.
        self.manifest = load_manifest(args.store, args.line or args.dataset)
        self.tokens = parse_tokens(args.tokens)
        self.lock = threading.Lock()
        self.done = 0
        self.killed_at = None
        self.kill_done = not args.kill_pid

    def fetch_args(self, directory, extra=()):
        accept = [a for n in self.args.accept_schema.split(",") if n for a in ("--accept-schema", n)]
        return ["fetch", "--server", self.args.server, "--dataset", self.args.dataset, "--dir", directory, "--json",
                *accept, *extra]

    def served_gzip_size(self, token):
        """The gzip size the server's manifest names: a version stored as a step has no gzip copy in the store, only
        the one the server made (docs/delta.md)."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        status, _, body = http(f"{self.args.server}/v1/datasets/{self.args.dataset}/manifest", headers)
        return json.loads(body)["gzipSize"] if status == 200 else 0

    def cut_and_resume(self, directory, token, expected):
        """Starts a throttled fetch, kills it with SIGKILL once half the gzip copy is on disk, fetches again."""
        gzip_size = expected["gzipSize"] or self.served_gzip_size(token)
        rate = max(256 * 1024, gzip_size // 4)
        env = dict(os.environ)
        if token:
            env["FERRY_TOKEN"] = token
        partial = os.path.join(directory, ".ferry", "partial.gz")
        process = subprocess.Popen(
            # --no-patch: a cut download is a full download (a patch is small and not resumed).
            [self.args.ferry] + self.fetch_args(directory, ["--limit-rate", str(rate), "--no-patch"]),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        cut_at = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and process.poll() is None:
            try:
                size = os.path.getsize(partial)
            except OSError:
                size = 0
            if size >= gzip_size // 2:
                process.send_signal(signal.SIGKILL)
                cut_at = size
                break
            time.sleep(0.02)
        if process.poll() is None and cut_at is None:
            process.send_signal(signal.SIGKILL)  # the deadline passed: never leave it running
        process.wait(timeout=30)
        return cut_at

    def device(self, index, cut):
        directory = os.path.join(self.args.root, f"dev-{index:04d}")
        os.makedirs(directory, exist_ok=True)
        scope = device_scope(index, self.tokens)
        token = self.tokens[scope]
        expected = current(self.manifest, scope)
        result = {"device": index, "scope": scope, "ok": False, "attempts": 0, "cut": cut, "errors": []}
        started = time.monotonic()
        if cut:
            result["cutAt"] = self.cut_and_resume(directory, token, expected)
        for attempt in range(1, ATTEMPTS + 1):
            result["attempts"] = attempt
            t0 = time.monotonic()
            try:
                fetched = run_ferry(self.args.ferry, self.fetch_args(directory, ["--no-patch"] if cut else []), token)
            except subprocess.TimeoutExpired:
                result["errors"].append(f"attempt {attempt}: fetch timed out after {FETCH_TIMEOUT} s")
                continue
            seconds = time.monotonic() - t0
            answer = last_json(fetched.stdout)
            if fetched.returncode != 0 or answer is None:
                result["errors"].append(f"attempt {attempt}: exit {fetched.returncode}: {fetched.stderr.strip()[-300:]}")
                time.sleep(0.5 * attempt)
                continue
            result["fetchSeconds"] = round(seconds, 3)
            result["bytesReceived"] = answer.get("bytesReceived")
            result["resumedFrom"] = answer.get("resumedFrom")
            result["path"] = answer.get("path")
            problem = self.check(directory, token, answer, expected)
            if problem:
                result["errors"].append(f"attempt {attempt}: {problem}")
                continue
            result["ok"] = True
            break
        result["seconds"] = round(time.monotonic() - started, 3)
        if cut and result["ok"] and not (result.get("cutAt") and (result.get("resumedFrom") or 0) > 0):
            result["errors"].append("the cut download did not resume (cut at %s, resumedFrom %s)" % (result.get("cutAt"), result.get("resumedFrom")))
        with self.lock:
            self.done += 1
            kill_now = not self.kill_done and self.done >= self.args.kill_at * self.args.devices
            if kill_now:
                self.kill_done = True
        if kill_now:
            self.kill_replica()
        return result

    def check(self, directory, token, answer, expected):
        """None when the device holds the expected version; otherwise what is wrong."""
        if self.args.phase == "initial":
            if answer.get("sha256") != expected["sha256"] or answer.get("version") != expected["version"]:
                return f"installed {answer.get('version')}/{answer.get('sha256')}, expected {expected['version']}/{expected['sha256']}"
            return None
        updated = os.path.join(directory, "updated.db")
        if answer.get("pendingSha256") != expected["sha256"] or not os.path.exists(updated):
            return f"pending {answer.get('pendingVersion')}/{answer.get('pendingSha256')}, expected {expected['version']}/{expected['sha256']}"
        if answer.get("path") == "patch":
            # A patched updated.db holds the published rows, not the published bytes: the client checked it against
            # the version's content digest, and the verify phase compares every live database with the published
            # file row for row.
            if answer.get("patchTo") != expected["version"]:
                return f"patched to {answer.get('patchTo')}, expected {expected['version']}"
        else:
            actual = sha256_file(updated)
            if actual != expected["sha256"]:
                return f"updated.db is {actual}, not the published {expected['sha256']}"
        applied = run_ferry(self.args.ferry, ["apply", "--dir", directory, "--json"], token, timeout=300)
        if applied.returncode != 0:
            return f"apply failed: {applied.stderr.strip()[-300:]}"
        # The driver's choice, to bound the disk a run needs: the rollback copy is not part of what is checked.
        previous = os.path.join(directory, "previous.db")
        if os.path.exists(previous):
            os.remove(previous)
        status = last_json(run_ferry(self.args.ferry, ["status", "--dir", directory, "--json"], token, timeout=300).stdout) or {}
        if status.get("sha256") != expected["sha256"] or status.get("version") != expected["version"] or status.get("state") != "upToDate":
            return f"after apply the device says {status}"
        return None

    def kill_replica(self):
        if self.args.kill_metrics:
            try:
                with urllib.request.urlopen(self.args.kill_metrics, timeout=5) as response:
                    text = response.read().decode()
                with open(self.args.out + ".killed-metrics", "w", encoding="utf-8") as f:
                    f.write(text)
            except OSError as error:
                with open(self.args.out + ".killed-metrics", "w", encoding="utf-8") as f:
                    f.write(f"# could not read the metrics before the kill: {error}\n")
        os.kill(self.args.kill_pid, signal.SIGKILL)
        self.killed_at = time.time()

    def run(self):
        count = self.args.devices
        step = count / self.args.cut if self.args.cut else 0
        cut = {int(i * step) for i in range(self.args.cut)} if self.args.cut else set()
        started = time.time()
        with concurrent.futures.ThreadPoolExecutor(max_workers=self.args.concurrency) as pool:
            results = list(pool.map(lambda i: self.device(i, i in cut), range(count)))
        report = {
            "phase": self.args.phase, "devices": count, "concurrency": self.args.concurrency, "cut": len(cut),
            "seconds": round(time.time() - started, 2), "killedPid": self.args.kill_pid, "killedAt": self.killed_at,
            "startedAt": started, "results": results,
        }
        with open(self.args.out, "w", encoding="utf-8") as f:
            json.dump(report, f)
        failed = [r for r in results if not r["ok"]]
        print(f"{self.args.phase}: {count - len(failed)}/{count} devices ok in {report['seconds']} s"
              + (f", replica {self.args.kill_pid} killed with SIGKILL after {self.args.kill_at:.0%} of the devices" if self.args.kill_pid else "")
              + (f", {len(cut)} downloads cut midway" if cut else ""))
        for r in failed[:5]:
            print(f"  device {r['device']} failed: {r['errors'][-1] if r['errors'] else '?'}")


def verify(args):
    manifest = load_manifest(args.store, args.dataset)
    tokens = parse_tokens(args.tokens)
    devices = sorted(d for d in os.listdir(args.root) if d.startswith("dev-"))
    chosen = devices if not args.sample or args.sample >= len(devices) else devices[:: max(1, len(devices) // args.sample)][: args.sample]
    jobs = []
    for name in chosen:
        scope = device_scope(int(name.split("-")[1]), tokens)
        record = current(manifest, scope)
        published = published_file(args.store, args.dataset, record["sha256"], args.work)
        jobs.append((os.path.join(args.root, name, "database.db"), published))
    started = time.time()
    with concurrent.futures.ProcessPoolExecutor(max_workers=2) as pool:
        differences = list(pool.map(logical_difference, jobs))
    report = {"devices": len(devices), "checked": len(jobs), "different": [j[0] for j, d in zip(jobs, differences) if d],
              "details": [d for d in differences if d][:5], "seconds": round(time.time() - started, 1)}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(report, f)
    print(f"verify: {len(jobs) - len(report['different'])}/{len(jobs)} live databases hold exactly the published rows "
          f"({report['seconds']} s)")


def logical_difference(job):
    """'' when every table of the published file has the same rows in the device's database, else what differs."""
    device, published = job
    try:
        con = sqlite3.connect(f"file:{device}?mode=ro", uri=True)
        con.execute("ATTACH ? AS pub", (f"file:{published}?mode=ro",))
        tables = [r[0] for r in con.execute("SELECT name FROM pub.sqlite_master WHERE type = 'table' ORDER BY name")]
        problems = []
        for table in tables:
            q = '"' + table.replace('"', '""') + '"'
            only_device = con.execute(f"SELECT count(*) FROM (SELECT * FROM main.{q} EXCEPT SELECT * FROM pub.{q})").fetchone()[0]
            only_published = con.execute(f"SELECT count(*) FROM (SELECT * FROM pub.{q} EXCEPT SELECT * FROM main.{q})").fetchone()[0]
            counts = [con.execute(f"SELECT count(*) FROM {db}.{q}").fetchone()[0] for db in ("main", "pub")]
            if only_device or only_published or counts[0] != counts[1]:
                problems.append(f"{table}: {only_device} rows only on the device, {only_published} only published, counts {counts}")
        con.close()
        return "; ".join(problems)
    except sqlite3.Error as error:
        return f"{device}: {error}"


# ---------------------------------------------------------------------------------------------------- leak probe


def http(url, headers, method="GET"):
    request = urllib.request.Request(url, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def identify(body, headers, by_content, every, objects_dir):
    """The object these bytes are: by the whole body's checksum (a stored object, or the file of a version the server
    built from steps, whose checksum is its name), else by the object the ETag names: provided the bytes are that
    stored object's bytes at the Content-Range offset, or, for an object only the server has (a built version's gzip
    copy, a catch-up patch), provided a whole gzip body inflates to the named version. None when they are neither."""
    digest = hashlib.sha256(body).hexdigest()
    name = by_content.get(digest)
    if name:
        return name
    if digest + ".sqlite" in every:
        return digest + ".sqlite"
    tag = (headers.get("ETag") or "").strip('"')
    if len(tag) < 64:
        return None
    candidates = [tag[:64] + ".sqlite.gz"] if tag.endswith("-gzip") else [tag[:64] + ".sqlite", tag[:64] + ".patch.gz"]
    match = re.match(r"bytes (\d+)-(\d+)/\d+", headers.get("Content-Range") or "")
    for candidate in candidates:
        if candidate not in every:
            continue
        path = os.path.join(objects_dir, candidate)
        if not os.path.exists(path):
            # The server's own object: a range of it cannot be checked here, so the name it sent stands.
            if match or not candidate.endswith(".sqlite.gz"):
                return candidate
            try:
                return candidate if hashlib.sha256(gzip.decompress(body)).hexdigest() == tag[:64] else None
            except (OSError, EOFError):
                return None
        if not match:
            continue
        with open(path, "rb") as f:
            f.seek(int(match.group(1)))
            if f.read(len(body)) == body:
                return candidate
    return None


def probe(args):
    manifest = load_manifest(args.store, args.dataset)
    tokens = parse_tokens(args.tokens)
    objects_dir = os.path.join(args.store, args.dataset, "objects")
    by_content = {sha256_file(os.path.join(objects_dir, name)): name for name in os.listdir(objects_dir)}
    allowed = {scope: objects_of(manifest, scope) for scope in tokens}
    every = set().union(*allowed.values())
    numbers = sorted({r["version"] for e in manifest["scopes"] for r in e["retained"]})
    patches = sorted({f"{p['from']}-{p['to']}" for e in manifest["scopes"] for r in e["retained"] for p in r.get("patches") or []})
    base = f"{args.server}/v1/datasets/{args.dataset}"
    urls = [f"{base}/versions/{n}" for n in numbers] + [f"{base}/patches/{p}" for p in patches]
    urls += [f"{base}/objects/{name}" for name in sorted(every)]
    callers = [(f"scope {s}", t, allowed[s]) for s, t in tokens.items()]
    callers += [("no token", None, set()), ("unknown token", "no-such-token-0000", set())]
    if args.revoked:
        callers.append(("revoked token", args.revoked, set()))
    variants = [{"Accept-Encoding": "gzip"}, {}, {"Accept-Encoding": "gzip", "Range": "bytes=0-65535"}]
    requests = 0
    leaked = 0
    leaks = []
    statuses = {}
    for label, token, mine in callers:
        for url in urls:
            for variant in variants:
                headers = dict(variant)
                if token:
                    headers["Authorization"] = f"Bearer {token}"
                status, response_headers, body = http(url, headers)
                requests += 1
                statuses[f"{label} {status}"] = statuses.get(f"{label} {status}", 0) + 1
                if status not in (200, 206) or not body:
                    continue
                name = identify(body, response_headers, by_content, every, objects_dir)
                if name not in mine:
                    leaked += len(body)
                    leaks.append(f"{label}: {url} {variant} → {status}, {len(body)} bytes of {name or 'unknown bytes'}")
    report = {"requests": requests, "leakedBytes": leaked, "leaks": leaks[:10], "statuses": statuses, "urls": len(urls)}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(report, f)
    print(f"probe: {requests} requests for {len(urls)} URLs as {len(callers)} callers; {leaked} bytes of another scope's "
          f"(or any scope's, without a valid token) objects")
    for line in leaks[:10]:
        print("  LEAK " + line)


# ---------------------------------------------------------------------------------------------------- report

LOG_FIELDS = ["id", "method", "uri", "status", "sent", "object", "cache", "upstream", "upstreamStatus", "upstreamBytes",
              "contentRange", "time"]
SNAPSHOT_URI = re.compile(r"^/v1/datasets/[a-z0-9_-]+/(versions|patches)/[0-9-]+$")


def numbers(field):
    return [int(x) for x in re.findall(r"\d+", field)] if field and field != "-" else []


def read_log(path, offset, end):
    """Groups the access log's lines from byte `offset` to `end` by request id: nginx logs a request's subrequests
    (the object lookup, each slice after the first) before the request itself, so the last line of a group that is
    not the lookup is the client's request."""
    groups = {}
    order = []
    with open(path, encoding="utf-8", errors="replace") as f:
        f.seek(offset)
        text = f.read(max(0, end - offset)) if end else f.read()
        for line in text.splitlines():
            parts = line.rstrip("\n").split("\t")
            if len(parts) != len(LOG_FIELDS):
                continue
            entry = dict(zip(LOG_FIELDS, parts))
            if entry["id"] not in groups:
                groups[entry["id"]] = []
                order.append(entry["id"])
            groups[entry["id"]].append(entry)
    return [groups[i] for i in order]


def metric_bytes(paths):
    total = 0.0
    objects = 0.0
    for path in paths:
        if not path or not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("ferry_http_response_bytes_total{"):
                    value = float(line.rsplit(" ", 1)[1])
                    total += value
                    if "/objects/" in line:
                        objects += value
    return total, objects


def percentile(values, p):
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def report(args):
    manifest = load_manifest(args.store, args.dataset)
    objects_dir = os.path.join(args.store, args.dataset, "objects")
    stored = set(os.listdir(objects_dir)) if os.path.isdir(objects_dir) else set()
    sizes = object_sizes(manifest)
    versions = object_versions(manifest)
    groups = read_log(args.log, args.log_from, args.log_to)

    client_bytes = origin_bytes = 0
    snap_client = snap_origin = 0
    snap_requests = snap_all_hit = 0
    slices = slice_hits = 0
    lookups = lookup_bytes = 0
    fetches = {}  # (object, content range) → times fetched from an origin
    asked = set()  # the objects clients were answered with: each must leave an origin at least once
    origin_by_object = {}
    fills_by_upstream = collections.Counter()  # snapshot bytes nginx received, by the address that sent them
    statuses = {}
    for group in groups:
        lookup_lines = [e for e in group if e["uri"] == "/_ferry/lookup"]
        lines = [e for e in group if e["uri"] != "/_ferry/lookup"]
        for e in lookup_lines:
            lookups += 1
            lookup_bytes += sum(numbers(e["upstreamBytes"]))
            origin_bytes += sum(numbers(e["upstreamBytes"]))
        if not lines:
            continue
        main = lines[-1]
        sent = int(main["sent"]) if main["sent"].isdigit() else 0
        client_bytes += sent
        for e in lines:
            origin_bytes += sum(numbers(e["upstreamBytes"]))
        statuses[main["status"]] = statuses.get(main["status"], 0) + 1
        if not SNAPSHOT_URI.match(main["uri"]):
            continue
        snap_requests += 1
        snap_client += sent
        all_hit = True
        for e in lines:
            got = sum(numbers(e["upstreamBytes"]))
            snap_origin += got
            if e["cache"] not in ("-", ""):
                slices += 1
                if e["cache"] == "HIT":
                    slice_hits += 1
                else:
                    all_hit = False
            elif got:
                all_hit = False
            if e["object"] not in ("-", ""):
                asked.add(e["object"])
            # $upstream_addr and $upstream_bytes_received list one value per upstream tried, in the same order.
            # Only objects of the store can come from the bucket: a version a replica built from its checkpoint and
            # steps, and a catch-up patch, are the replica's own (docs/delta.md).
            if e["object"] in stored:
                for addr, count in zip(re.split(r", | : ", e["upstream"]), numbers(e["upstreamBytes"])):
                    fills_by_upstream[addr] += count
            if got and e["object"] not in ("-", ""):
                key = (e["object"], e["contentRange"])
                fetches[key] = fetches.get(key, 0) + 1
                origin_by_object[e["object"]] = origin_by_object.get(e["object"], 0) + got
        snap_all_hit += 1 if all_hit else 0

    waves = []
    for path in args.waves:
        with open(path, encoding="utf-8") as f:
            waves.append(json.load(f))
    with open(args.verify, encoding="utf-8") as f:
        checked = json.load(f)
    probed = None
    if args.probe:
        with open(args.probe, encoding="utf-8") as f:
            probed = json.load(f)
    before, _ = metric_bytes(args.metrics_before)
    after, after_objects = metric_bytes(args.metrics_after)
    before_objects = metric_bytes(args.metrics_before)[1]

    byte_ratio = 1 - snap_origin / snap_client if snap_client else 0.0
    # The best a cache can do: every object the clients got leaves an origin exactly once. With k objects per
    # version (one per scope) and N devices, that is 1 - k/N of the bytes: 99.5 % for 200 devices and one object,
    # 98.5 % for 200 devices over 3 tiers.
    # (An object only the replicas have, a version built from steps or a catch-up patch, counts as what it cost once.)
    unavoidable = sum(sizes.get(name) or origin_by_object.get(name, 0) for name in asked)
    ceiling = 1 - unavoidable / snap_client if snap_client else 0.0
    target = min(0.99, ceiling - 0.001)
    request_ratio = snap_all_hit / snap_requests if snap_requests else 0.0
    slice_ratio = slice_hits / slices if slices else 0.0
    print(f"\n=== {args.label} ===")
    print(f"{'snapshot bytes to clients (nginx $bytes_sent)':58} {snap_client:>16,}")
    print(f"{'snapshot bytes from origins (nginx $upstream_bytes_received)':58} {snap_origin:>16,}")
    print(f"{'cache hit ratio by bytes':58} {byte_ratio:>15.3%}  (best possible {ceiling:.3%}: each object once; target {target:.2%})")
    print(f"{'cache hit ratio by requests (every slice a HIT)':58} {request_ratio:>15.3%}  ({snap_all_hit}/{snap_requests})")
    print(f"{'cache hit ratio by slices':58} {slice_ratio:>15.3%}  ({slice_hits}/{slices})")
    print(f"{'all bytes: origins → nginx / nginx → clients':58} {origin_bytes:>16,} / {client_bytes:,}  "
          f"({origin_bytes / client_bytes:.2%})" if client_bytes else "")
    print(f"{'  of which object lookups (auth_request)':58} {lookup_bytes:>16,}  ({lookups} lookups)")
    print(f"{'origin body bytes per /metrics (all routes; objects route)':58} {after - before:>16,.0f}  ({after_objects - before_objects:,.0f})")
    print(f"{'client answers by status':58} {json.dumps(dict(sorted(statuses.items())))}")
    if args.fill_from:
        from_bucket = fills_by_upstream.get(args.fill_from, 0)
        others = {a: n for a, n in fills_by_upstream.items() if a != args.fill_from and n}
        print(f"{'snapshot bytes nginx filled from the bucket (' + args.fill_from + ')':58} {from_bucket:>16,}"
              + (f"  (from elsewhere: {json.dumps(others)})" if others else "  (all of them)"))
    print("times each version left an origin (per object: fetches of its most-fetched slice; origin bytes / object size):")
    worst = 0
    # Objects the store holds (named by the driver's versions) may leave the origins once per cache. A file a replica
    # built on request for a whole-file download of a version stored as a step (docs/delta.md, "What a server does per
    # version") is in no store: each replica makes its own, and a fill the replica kill cuts goes to the other one, so
    # such an object may leave twice.
    worst_built = 0
    # A step version's file and gzip copy are named in the manifest but held by no store: built on request.
    built = {record["sha256"] + suffix for entry in manifest["scopes"] for record in entry["retained"]
             if record.get("step") and not record.get("checkpoint") for suffix in (".sqlite", ".sqlite.gz")}
    for name in sorted(origin_by_object, key=lambda n: (str(versions.get(n, ("", 0, ""))[0]), str(versions.get(n, ("", 0, ""))[1]), n)):
        most = max(count for (obj, _), count in fetches.items() if obj == name)
        if name in versions and name not in built:
            worst = max(worst, most)
        else:
            worst_built = max(worst_built, most)
        scope, version, kind = versions.get(name, ("?", "?", ""))
        size = sizes.get(name)
        ratio = f"{origin_by_object[name] / size:.3f}" if size else "?"
        scope_text = "" if scope is None else f"scope {scope}, "
        print(f"  {scope_text}version {version} {kind:10} {name[:12]}…  {most}x per slice, {ratio}x its {size:,} bytes" if size else
              f"  {name}: {most}x per slice")

    failed = 0
    for wave in waves:
        results = wave["results"]
        bad = [r for r in results if not r["ok"] or (r["cut"] and r["errors"])]
        failed += len(bad)
        plain = [r["fetchSeconds"] for r in results if r["ok"] and not r["cut"] and "fetchSeconds" in r]
        cut = [r for r in results if r["cut"]]
        resumed = sum(1 for r in cut if r["ok"] and (r.get("resumedFrom") or 0) > 0 and r.get("cutAt"))
        retried = sum(1 for r in results if r["attempts"] > 1)
        p50, p99 = percentile(plain, 50), percentile(plain, 99)
        timing = f"client fetch p50 {p50:.2f} s, p99 {p99:.2f} s" if plain else "no device finished"
        paths = collections.Counter(r.get("path") for r in results if r["ok"])
        by_path = ", ".join(f"{n} by {p}" for p, n in sorted(paths.items(), key=lambda kv: str(kv[0])))
        print(f"{wave['phase']} wave: {len(results)} devices, {wave['concurrency']} at a time, {wave['seconds']} s; "
              f"{timing}; {by_path}; failed {len(bad)}; retried {retried}"
              + (f"; {resumed}/{len(cut)} cut midway and resumed" if cut else "")
              + ("; a replica was killed with SIGKILL during it" if wave.get("killedAt") else ""))
        for r in bad[:5]:
            print(f"  device {r['device']}: {'; '.join(r['errors'][-2:])}")
    print(f"devices ending with the published version: byte-identical download (sha256) for every full update, the content digest for every patch; "
          f"live database.db equal row for row: {checked['checked'] - len(checked['different'])}/{checked['checked']} checked")
    if probed:
        print(f"leak probe: {probed['requests']} requests, {probed['leakedBytes']} bytes of an object outside the caller's scope")

    missed = []
    if byte_ratio < target:
        missed.append(f"cache hit ratio by bytes {byte_ratio:.3%} < {target:.2%}")
    if worst > 1:
        missed.append(f"a version left the origins {worst} times for one cache")
    if worst_built > 2:
        missed.append(f"a file built on request left the origins {worst_built} times for one cache")
    if failed:
        missed.append(f"{failed} failed devices")
    if checked["different"]:
        missed.append(f"{len(checked['different'])} devices differ from the published version")
    if checked["checked"] == 0:
        missed.append("no device was checked")
    if args.fill_from and (not fills_by_upstream.get(args.fill_from) or others):
        # --presign-objects: every fill of a version or patch comes from the bucket, none from a replica (a lookup
        # that failed over to a replica's own answer, @ferry_origin, would show here as well).
        missed.append(f"snapshot bytes filled from {json.dumps(others)}, not only from the bucket {args.fill_from}")
    if probed and probed["leakedBytes"]:
        missed.append(f"{probed['leakedBytes']} bytes leaked to another scope")
    for wave in waves:
        cut = [r for r in wave["results"] if r["cut"]]
        if cut and not all(r.get("cutAt") and (r.get("resumedFrom") or 0) > 0 for r in cut if r["ok"]):
            missed.append(f"{wave['phase']}: a cut download did not resume")
    if missed:
        print("TARGETS MISSED: " + "; ".join(missed))
        raise SystemExit(1)
    print(f"targets met: {byte_ratio:.2%} of snapshot bytes from the cache (target {target:.2%}); each version left the origins at most once; "
          "0 failed devices; every device on the published version" + ("; 0 bytes to another scope" if probed else ""))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("wave")
    for name in ("--ferry", "--server", "--store", "--dataset", "--root", "--out"):
        w.add_argument(name, required=True)
    w.add_argument("--devices", type=int, required=True)
    w.add_argument("--concurrency", type=int, required=True)
    w.add_argument("--phase", choices=["initial", "update"], required=True)
    w.add_argument("--tokens", default="")
    w.add_argument("--cut", type=int, default=0)
    w.add_argument("--kill-pid", type=int, default=0)
    w.add_argument("--kill-at", type=float, default=0.5)
    w.add_argument("--kill-metrics", default="")
    w.add_argument("--line", default="", help="the schema line (DATASET.vN) the devices must end up on")
    w.add_argument("--accept-schema", default="", help="schema versions the devices accept, comma-separated")
    v = sub.add_parser("verify")
    for name in ("--store", "--dataset", "--root", "--out"):
        v.add_argument(name, required=True)
    v.add_argument("--tokens", default="")
    v.add_argument("--sample", type=int, default=0)
    v.add_argument("--work", default="", help="the publisher's cache (a bucket store): where it keeps built files")
    p = sub.add_parser("probe")
    for name in ("--server", "--store", "--dataset", "--tokens", "--out"):
        p.add_argument(name, required=True)
    p.add_argument("--revoked", default="")
    r = sub.add_parser("report")
    for name in ("--store", "--dataset", "--log", "--verify", "--label"):
        r.add_argument(name, required=True)
    r.add_argument("--log-from", type=int, default=0)
    r.add_argument("--log-to", type=int, default=0)
    r.add_argument("--metrics-before", nargs="*", default=[])
    r.add_argument("--metrics-after", nargs="*", default=[])
    r.add_argument("--waves", nargs="+", required=True)
    r.add_argument("--probe", default="")
    r.add_argument("--fill-from", default="", help="HOST:PORT every snapshot byte nginx fetched must come from (the bucket)")
    args = parser.parse_args()
    if args.command == "wave":
        if args.cut > args.devices:
            parser.error("--cut cannot exceed --devices")
        Wave(args).run()
    elif args.command == "verify":
        verify(args)
    elif args.command == "probe":
        probe(args)
    else:
        report(args)


if __name__ == "__main__":
    main()
