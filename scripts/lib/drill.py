"""Kill -9 drills for Ferry (run by scripts/drill). Stdlib only; every loop is bounded; every process started here
is stopped by its PID; all traffic stays on 127.0.0.1."""
import argparse, collections, hashlib, json, os, random, shutil, signal, socket, sqlite3, subprocess, sys, tempfile, time, uuid
import urllib.parse

A = argparse.ArgumentParser()
A.add_argument("--ferry", required=True)
A.add_argument("--database-url", required=True)
A.add_argument("--rounds", type=int, default=100)
A.add_argument("--kinds", default="publisher,lines,s3publisher,client,server,app,attachments")
A.add_argument("--seed", type=int, default=None)
ARGS = A.parse_args()
SEED = ARGS.seed if ARGS.seed is not None else random.randrange(1 << 30)
RNG = random.Random(SEED)
WORK = tempfile.mkdtemp(prefix="ferry-drill.")
PROCS = []  # every child, stopped by PID at exit
VIOLATIONS = collections.Counter()
KILLS = collections.defaultdict(collections.Counter)
NOTES = []


def violation(kind, what):
    VIOLATIONS[kind] += 1
    NOTES.append(f"{kind}: {what}")
    print(f"  VIOLATION {kind}: {what}", flush=True)


def psql(db_url, sql):
    out = subprocess.run(["psql", db_url, "-qAt", "-v", "ON_ERROR_STOP=1", "-c", sql], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)
    return out.stdout.strip()


def db_url(name):
    u = urllib.parse.urlparse(ARGS.database_url)
    return u._replace(path="/" + name).geturl()


def create_db(name, ddl):
    psql(ARGS.database_url, f"DROP DATABASE IF EXISTS {name}")
    psql(ARGS.database_url, f"CREATE DATABASE {name}")
    psql(db_url(name), ddl)
    return db_url(name)


def ferry(*args, timeout=120):
    return subprocess.run([ARGS.ferry, *args], capture_output=True, text=True, timeout=timeout)


def start(*args):
    p = subprocess.Popen([ARGS.ferry, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    PROCS.append(p)
    return p


def kill9(p):
    if p.poll() is None:
        os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=30)


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close(); return port


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------------- publisher
def check_store(store, dataset, seen, kind="publisher"):
    """manifest.json parses; every file it names exists with its recorded size and SHA-256; no version number was
    ever given to different bytes (per scope)."""
    path = os.path.join(store, dataset, "manifest.json")
    if not os.path.exists(path):
        return None
    try:
        manifest = json.load(open(path))
    except Exception as e:
        violation(kind, f"manifest.json does not parse: {e}")
        return None
    objects = os.path.join(store, dataset, "objects")
    for entry in manifest.get("scopes", []):
        for record in (entry.get("history") or []) + entry["retained"]:
            # A checkpoint has its file; every other version its step (docs/delta.md, "Checkpoints and steps").
            if record.get("checkpoint", "step" not in record):
                f = os.path.join(objects, record["sha256"] + ".sqlite")
                if not os.path.exists(f) or os.path.getsize(f) != record["size"] or sha256(f) != record["sha256"]:
                    violation(kind, f"version {record['version']}: its file is missing or differs from its record")
            step = record.get("step")
            if step:
                p = os.path.join(objects, step["sha256"] + ".patch.gz")
                if not os.path.exists(p) or os.path.getsize(p) != step["size"] or sha256(p) != step["sha256"]:
                    violation(kind, f"version {record['version']}: its step is missing or differs from its record")
            key = (entry.get("scope"), record["version"])
            if seen.setdefault(key, record["sha256"]) != record["sha256"]:
                violation(kind, f"version {record['version']} was reused with different bytes")
            for patch in record.get("patches") or []:
                p = os.path.join(objects, patch["sha256"] + ".patch.gz")
                if not os.path.exists(p) or os.path.getsize(p) != patch["size"] or sha256(p) != patch["sha256"]:
                    violation(kind, f"patch {patch['from']}-{patch['to']} is missing or differs from its record")
    return manifest


def published_file(store, dataset, sha, work=None):
    """The SQLite file of a published version: a checkpoint's object, or the one the publisher built from steps
    (its work directory keeps each scope's current file: STORE/.ferry-work, or the bucket publisher's cache). None
    when neither is on this disk."""
    for candidate in (os.path.join(store, dataset, "objects", sha + ".sqlite"),
                      os.path.join(work or store, ".ferry-work", dataset, sha + ".sqlite")):
        if os.path.exists(candidate):
            if sha256(candidate) != sha:
                violation("publisher", f"{candidate} differs from its checksum")
            return candidate
    return None


def drill_publisher(rounds):
    url = create_db("drill_pub", "CREATE TABLE items (id integer PRIMARY KEY, v text NOT NULL);"
                                 "INSERT INTO items SELECT g, repeat(md5(g::text), 6) FROM generate_series(1, 60000) g;")
    store = os.path.join(WORK, "pub-store")
    template = os.path.join(WORK, "pub.yml")
    open(template, "w").write("dataset: drill\ntables: [{name: items}]\n")
    args = ["publish", "--config", template, "--database-url", url, "--store", store, "--keep", "3"]
    t0 = time.time(); first = ferry(*args); runtime = time.time() - t0
    if first.returncode != 0:
        raise RuntimeError(first.stdout + first.stderr)
    seen = {}
    tmp = os.path.join(store, "drill", "tmp")
    for r in range(rounds):
        psql(url, f"UPDATE items SET v = md5(v || '{r}') || substr(v, 33) WHERE id % 50 = {r % 50}")
        before = open(os.path.join(store, "drill", "manifest.json"), "rb").read()
        objects_before = set(os.listdir(os.path.join(store, "drill", "objects")))
        p = start(*args)
        time.sleep(RNG.uniform(0, runtime * 1.3))
        finished = p.poll() is not None
        kill9(p)
        after = open(os.path.join(store, "drill", "manifest.json"), "rb").read()
        if finished:
            phase = "finished"
        elif after != before:
            phase = "commit"
        elif set(os.listdir(os.path.join(store, "drill", "objects"))) - objects_before:
            phase = "store"
        else:
            phase = "export"
        KILLS["publisher"][phase] += 1
        check_store(store, "drill", seen)
        ok = ferry(*args)
        if ok.returncode != 0:
            violation("publisher", f"the publish after the kill failed: {ok.stderr.strip()[:200]}")
        manifest = check_store(store, "drill", seen)
        # The current version holds exactly PostgreSQL's rows, whether it was built from the previous version (the
        # usual case: a row index is kept beside it) or from scratch after a kill.
        if manifest:
            current = manifest["scopes"][0]["retained"][-1]["sha256"]
            db = sqlite3.connect(f"file:{published_file(store, 'drill', current)}?mode=ro", uri=True)
            stored = "\n".join(f"{i}|{v}" for i, v in db.execute("SELECT id, v FROM items ORDER BY id"))
            db.close()
            if stored != psql(url, "SELECT id || '|' || v FROM items ORDER BY id"):
                violation("publisher", f"the current version {current[:12]} does not hold PostgreSQL's rows")
        if os.path.isdir(tmp) and os.listdir(tmp):
            violation("publisher", f"tmp/ not cleaned by the next run: {os.listdir(tmp)}")


# ---------------------------------------------------------------------------------------------------- lines
LINE_TEMPLATES = {
    # Line 1 the old app's: v as it is. Line 2: v upper-cased and its length, a column line 1 lacks.
    1: "dataset: drill\nschemaVersion: 1\ntables: [{name: items, query: 'SELECT id, v FROM items', primaryKey: [id]}]\n",
    2: "dataset: drill\nschemaVersion: 2\ntables: [{name: items, query: 'SELECT id, upper(v) AS v, length(v) AS n FROM items', primaryKey: [id]}]\n",
}


def drill_lines(rounds):
    """One dataset in two schema lines (docs/schema-lines.md), killed at random instants: each line's manifest only
    names complete files, no version number is reused per line, and after the next publish both lines hold
    PostgreSQL's current rows, each through its own template."""
    url = create_db("drill_lines", "CREATE TABLE items (id integer PRIMARY KEY, v text NOT NULL);"
                                   "INSERT INTO items SELECT g, repeat(md5(g::text), 6) FROM generate_series(1, 40000) g;")
    store = os.path.join(WORK, "lines-store")
    args = ["publish", "--database-url", url, "--store", store, "--keep", "3"]
    for n, text in LINE_TEMPLATES.items():
        path = os.path.join(WORK, f"drill.v{n}.yml")
        open(path, "w").write(text)
        args += ["--config", path]
    t0 = time.time(); first = ferry(*args); runtime = time.time() - t0
    if first.returncode != 0:
        raise RuntimeError(first.stdout + first.stderr)
    lines = ["drill.v1", "drill.v2"]
    seen = {line: {} for line in lines}
    expected = {"drill.v1": "SELECT id || '|' || v FROM items ORDER BY id",
                "drill.v2": "SELECT id || '|' || upper(v) || '|' || length(v) FROM items ORDER BY id"}
    columns = {"drill.v1": "id, v", "drill.v2": "id, v, n"}

    def state():
        return {line: open(os.path.join(store, line, "manifest.json"), "rb").read() for line in lines}

    for r in range(rounds):
        psql(url, f"UPDATE items SET v = md5(v || '{r}') || substr(v, 33) WHERE id % 50 = {r % 50}")
        before = state()
        p = start(*args)
        time.sleep(RNG.uniform(0, runtime * 1.3))
        finished = p.poll() is not None
        kill9(p)
        after = state()
        changed = [line for line in lines if after[line] != before[line]]
        KILLS["lines"]["finished" if finished else ("between lines" if len(changed) == 1 else
                                                    "after both" if changed else "before a commit")] += 1
        for line in lines:
            check_store(store, line, seen[line], kind="lines")
        ok = ferry(*args)
        if ok.returncode != 0:
            violation("lines", f"the publish after the kill failed: {ok.stderr.strip()[:200]}")
        manifests = {line: check_store(store, line, seen[line], kind="lines") for line in lines}
        # (Their version numbers may differ: after a kill between the lines, the next publish finds the first line
        # already current, and it keeps its number.)
        if all(manifests.values()):
            for line, manifest in manifests.items():
                current = manifest["scopes"][0]["retained"][-1]["sha256"]
                db = sqlite3.connect(f"file:{published_file(store, line, current)}?mode=ro", uri=True)
                stored = "\n".join("|".join(str(c) for c in row) for row in db.execute(f"SELECT {columns[line]} FROM items ORDER BY id"))
                db.close()
                if stored != psql(url, expected[line]):
                    violation("lines", f"{line}'s current version {current[:12]} does not hold PostgreSQL's rows")
        for line in lines:
            tmp = os.path.join(store, line, "tmp")
            if os.path.isdir(tmp) and os.listdir(tmp):
                violation("lines", f"{line}/tmp/ not cleaned by the next run: {os.listdir(tmp)}")


# ---------------------------------------------------------------------------------------------------- s3publisher
S3_STORE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "s3_store.py")


def s3_store(*args):
    return subprocess.run([sys.executable, S3_STORE, *args], capture_output=True, text=True, timeout=300)


def drill_s3publisher(rounds):
    """`ferry publish --store s3://…` killed at random instants (issue 24): after each kill the bucket's manifest
    names only objects that exist with the right SHA-256 (checked with botocore, scripts/lib/s3_store.py), and the
    next run (one in four from an empty cache directory, as on a new machine) publishes PostgreSQL's rows and, with
    --object-grace 0s, leaves no leftover object and no multipart upload in progress. Needs FERRY_TEST_S3_* (the
    SeaweedFS of scripts/test or scripts/drill)."""
    endpoint = os.environ.get("FERRY_TEST_S3_ENDPOINT")
    if not endpoint:
        raise RuntimeError("FERRY_TEST_S3_ENDPOINT is not set: start SeaweedFS (ferry_start_seaweedfs)")
    os.environ["AWS_ACCESS_KEY_ID"] = os.environ["FERRY_TEST_S3_ACCESS_KEY"]
    os.environ["AWS_SECRET_ACCESS_KEY"] = os.environ["FERRY_TEST_S3_SECRET_KEY"]
    url = create_db("drill_s3", "CREATE TABLE items (id integer PRIMARY KEY, v text NOT NULL);"
                                "INSERT INTO items SELECT g, repeat(md5(g::text), 6) FROM generate_series(1, 60000) g;")
    bucket = "ferry-drill-" + uuid.uuid4().hex[:8]
    made = s3_store("create-bucket", bucket)
    if made.returncode != 0:
        raise RuntimeError(made.stderr)
    store = f"s3://{bucket}/drill"
    cache = os.path.join(WORK, "s3-cache")
    mirror = os.path.join(WORK, "s3-mirror")
    template = os.path.join(WORK, "s3.yml")
    open(template, "w").write("dataset: drill\ntables: [{name: items}]\n")
    args = ["publish", "--config", template, "--database-url", url, "--store", store, "--s3-endpoint", endpoint,
            "--cache-dir", cache, "--keep", "3", "--object-grace", "0s"]
    t0 = time.time(); first = ferry(*args); runtime = time.time() - t0
    if first.returncode != 0:
        raise RuntimeError(first.stdout + first.stderr)
    seen = {}

    def bucket_state():
        out = s3_store("state", store, "drill")
        return json.loads(out.stdout) if out.returncode == 0 else None

    for r in range(rounds):
        psql(url, f"UPDATE items SET v = md5(v || '{r}') || substr(v, 33) WHERE id % 50 = {r % 50}")
        before = bucket_state()
        p = start(*args)
        time.sleep(RNG.uniform(0, runtime * 1.3))
        finished = p.poll() is not None
        kill9(p)
        after = bucket_state()
        if finished:
            phase = "finished"
        elif before and after and after["manifest"] != before["manifest"]:
            phase = "commit"
        elif before and after and (after["objects"] != before["objects"] or after["uploads"] != before["uploads"]):
            phase = "upload"
        else:
            phase = "export"
        KILLS["s3publisher"][phase] += 1
        checked = s3_store("check", store)
        if checked.returncode != 0:
            violation("s3publisher", f"after a kill in {phase}: {checked.stderr.strip()[:300]}")
        if RNG.random() < 0.25:
            shutil.rmtree(cache, ignore_errors=True)  # the next run starts from an empty disk
        t0 = time.time(); ok = ferry(*args)
        # Kill within the time a publish takes now (incremental runs are shorter than the first, full one).
        runtime = 0.5 * runtime + 0.5 * (time.time() - t0)
        if ok.returncode != 0:
            violation("s3publisher", f"the publish after the kill failed: {ok.stderr.strip()[:200]}")
        shutil.rmtree(mirror, ignore_errors=True)
        checked = s3_store("check", store, "--strict", "--mirror", mirror)
        if checked.returncode != 0:
            violation("s3publisher", f"after the next run: {checked.stderr.strip()[:300]}")
            continue
        manifest = check_store(mirror, "drill", seen, kind="s3publisher")
        # A current version stored as a step is no file in the bucket: the publisher's cache keeps the one it built
        # (unless this round emptied the cache and found nothing new: then there is no file to read).
        current_file = published_file(mirror, "drill", manifest["scopes"][0]["retained"][-1]["sha256"], cache) \
            if manifest else None
        if manifest and current_file:
            current = manifest["scopes"][0]["retained"][-1]["sha256"]
            db = sqlite3.connect(f"file:{current_file}?mode=ro", uri=True)
            stored = "\n".join(f"{i}|{v}" for i, v in db.execute("SELECT id, v FROM items ORDER BY id"))
            db.close()
            if stored != psql(url, "SELECT id || '|' || v FROM items ORDER BY id"):
                violation("s3publisher", f"the bucket's current version {current[:12]} does not hold PostgreSQL's rows")


# ---------------------------------------------------------------------------------------------------- client
NOTES_DDL = """
CREATE TABLE notes (id text PRIMARY KEY, body text NOT NULL, pad text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now());
INSERT INTO notes (id, body, pad) SELECT md5(g::text)::uuid::text, 'note ' || g, repeat(md5(g::text), 8) FROM generate_series(1, 6000) g;
"""
NOTES_YML = """dataset: notes
timestamps: {created: created_at, updated: updated_at}
tables:
  - name: notes
    writable: true
    merge: newest-wins
"""


def serve(store, template, url, port):
    p = start("serve", "--store", store, "--port", str(port), "--config", template, "--database-url", url)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return p
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("ferry serve did not start")


def rows(path, where=""):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(f"SELECT id, body, pad FROM notes {where} ORDER BY id").fetchall()
    finally:
        con.close()


def check_client(dirpath, published, queued, edited_ever, server_url):
    """database.db passes integrity_check and holds a published version's rows plus the device's edits (pending, or
    acknowledged and not yet in a published version); a queued edit is still queued or acknowledged by the server,
    never gone; previous.db is intact."""
    st = ferry("status", "--dir", dirpath, "--json")
    if st.returncode != 0:
        violation("client", f"ferry status failed after the kill: {st.stderr.strip()[:200]}")
        return
    db = os.path.join(dirpath, "database.db")
    for name in ["database.db", "previous.db"]:
        f = os.path.join(dirpath, name)
        if not os.path.exists(f):
            continue
        con = sqlite3.connect(f)
        try:
            if con.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
                violation("client", f"{name} fails integrity_check")
            origin = con.execute("SELECT sha256 FROM ferry_origin").fetchone()
            outbox = dict(con.execute("SELECT key, vals FROM ferry_outbox").fetchall()) if name == "database.db" else {}
        except sqlite3.Error as e:
            violation("client", f"{name} cannot be read: {e}")
            continue
        finally:
            con.close()
        sha = origin[0] if origin else None
        if sha not in published:
            violation("client", f"{name} claims a version that was never published ({sha})")
            continue
        if name == "database.db":
            pending = {json.loads(k)["id"] for k in outbox}
            expected = [r for r in rows(published[sha]) if r[0] not in edited_ever]
            actual = [r for r in rows(f) if r[0] not in edited_ever]
            if expected != actual:
                violation("client", "database.db does not hold exactly its published version's rows plus the device's edits")
            for note_id, (body, queued_at) in queued.items():
                if note_id in pending or psql(server_url, f"SELECT body FROM notes WHERE id = '{note_id}'") == body:
                    continue
                # Acknowledged: the server answered a change of this row after the edit was queued (applied, or
                # rejected by the merge rule because the server's row was newer: both are answers, not losses).
                answered = psql(server_url, f"SELECT count(*) FROM ferry_changes WHERE result::jsonb->'row'->>'id' = '{note_id}' AND processed_at >= '{queued_at}'")
                if answered == "0":
                    violation("client", f"a queued edit of {note_id} is neither queued nor acknowledged")


def published_files(store, dataset, published):
    manifest = json.load(open(os.path.join(store, dataset, "manifest.json")))
    for entry in manifest["scopes"]:
        for record in entry["retained"]:
            copy = os.path.join(WORK, "published", record["sha256"] + ".sqlite")
            if not os.path.exists(copy):
                # A version stored as a step is on disk while it is current (the publisher's work directory): it
                # is copied then, as each publish is followed by this call.
                f = published_file(store, dataset, record["sha256"])
                if f is None:
                    continue
                os.makedirs(os.path.dirname(copy), exist_ok=True)
                shutil.copy(f, copy)  # retention may prune it later; the check needs its rows
            published[record["sha256"]] = copy


def drill_client(rounds):
    url = create_db("drill_client", NOTES_DDL)
    store = os.path.join(WORK, "client-store")
    template = os.path.join(WORK, "notes.yml")
    open(template, "w").write(NOTES_YML)
    publish = ["publish", "--config", template, "--database-url", url, "--store", store, "--keep", "3"]
    if ferry(*publish).returncode != 0:
        raise RuntimeError("first publish failed")
    published = {}
    published_files(store, "notes", published)
    port = free_port()
    server = serve(store, template, url, port)
    base = f"http://127.0.0.1:{port}"
    device = os.path.join(WORK, "device")
    if ferry("fetch", "--server", base, "--dataset", "notes", "--dir", device, "--apply").returncode != 0:
        raise RuntimeError("initial fetch failed")
    ids = [r[0] for r in rows(os.path.join(device, "database.db"))]
    queued = {}
    edited_ever = set()
    # The expected runtime: a full download of a new version through the throttled link, and its swap.
    psql(url, "UPDATE notes SET body = body || '.', updated_at = now()")
    ferry(*publish)
    published_files(store, "notes", published)
    time.sleep(1.1)  # the server sees a new manifest within a second
    t0 = time.time()
    ferry("fetch", "--server", base, "--dataset", "notes", "--dir", device, "--apply", "--limit-rate", "512K", "--no-patch")
    runtime = time.time() - t0
    # The patch path's runtime: a round's change (1/40 of the rows) arrives as a row-level patch.
    psql(url, "UPDATE notes SET body = body || '!', updated_at = now() WHERE abs(hashtext(id)) % 40 = 39")
    ferry(*publish)
    published_files(store, "notes", published)
    time.sleep(1.1)
    t0 = time.time()
    measured = ferry("fetch", "--server", base, "--dataset", "notes", "--dir", device, "--apply", "--json")
    patch_runtime = time.time() - t0
    if measured.returncode != 0 or json.loads(measured.stdout)["path"] != "patch":
        raise RuntimeError(f"the update by patch was not taken: {measured.stdout.strip()[:300]} {measured.stderr.strip()[:300]}")
    psql(url, "UPDATE notes SET body = body || '.', updated_at = now()")
    ferry(*publish)
    published_files(store, "notes", published)
    time.sleep(1.1)
    t0 = time.time()
    ferry("sync", "--server", base, "--dataset", "notes", "--dir", device)
    sync_runtime = time.time() - t0
    try:
        for r in range(rounds):
            psql(url, f"UPDATE notes SET body = 'server {r} ' || id, updated_at = now() WHERE abs(hashtext(id)) % 40 = {r % 40}")
            ferry(*publish)
            published_files(store, "notes", published)
            time.sleep(1.1)  # the server sees a new manifest within a second
            note = RNG.choice(ids)
            body = f"device edit {r}"
            queued_at = psql(url, "SELECT now()")
            if ferry("exec", "--dir", device, f"UPDATE notes SET body = '{body}' WHERE id = '{note}'").returncode == 0:
                queued[note] = (body, queued_at)
                edited_ever.add(note)
            # Fetches alternate between the full download (throttled, so kills land inside it) and the patch path.
            command = "sync" if r % 2 else "fetch"
            by_patch = command == "fetch" and r % 4 == 2
            extra = ["--apply"] + ([] if by_patch else ["--limit-rate", "512K", "--no-patch"]) if command == "fetch" else []
            p = start(command, "--server", base, "--dataset", "notes", "--dir", device, *extra)
            window = sync_runtime if command == "sync" else (patch_runtime if by_patch else runtime)
            if by_patch:
                command = "fetch (patch)"
            # Half the kills anywhere in the run, half near its end, where verify and swap take their short turn.
            time.sleep(RNG.uniform(0, window * 1.1) if RNG.random() < 0.5 else RNG.uniform(window * 0.8, window * 1.05))
            finished = p.poll() is not None
            kill9(p)
            dot = os.path.join(device, ".ferry")
            if finished:
                phase = "finished"
            elif os.path.exists(os.path.join(dot, "patched.sqlite")):
                phase = "patch"
            elif os.path.exists(os.path.join(device, "updated.db")):
                phase = "verify/swap"
            elif os.path.isdir(dot) and any(n.startswith("partial") for n in os.listdir(dot)):
                phase = "download"
            else:
                phase = "connect/push"
            KILLS["client"][f"{command}: {phase}"] += 1
            check_client(device, published, queued, edited_ever, url)
            done = ferry("fetch", "--server", base, "--dataset", "notes", "--dir", device, "--apply")
            if done.returncode != 0:
                violation("client", f"the fetch after the kill failed: {done.stderr.strip()[:200]}")
            check_client(device, published, queued, edited_ever, url)
            # Acknowledged edits are settled: the server's later updates may overwrite them from the next round on.
            con = sqlite3.connect(os.path.join(device, "database.db"))
            still = {json.loads(k)["id"] for (k,) in con.execute("SELECT key FROM ferry_outbox")}
            con.close()
            for note_id in [n for n in queued if n not in still]:
                queued.pop(note_id)
    finally:
        kill9(server)


# ---------------------------------------------------------------------------------------------------- server
# Every write to notes, whoever makes it, appends one row to note_effects (a trigger, in the merger's transaction):
# a change applied twice (a retry after the kill writing again) shows as two effects, one whose write was lost as none.
EFFECTS_DDL = """
CREATE TABLE note_effects (seq bigserial PRIMARY KEY, note_id text NOT NULL, body text NOT NULL);
CREATE FUNCTION note_effect() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN INSERT INTO note_effects (note_id, body) VALUES (NEW.id, NEW.body); RETURN NEW; END $$;
CREATE TRIGGER note_effect AFTER INSERT OR UPDATE ON notes FOR EACH ROW EXECUTE FUNCTION note_effect();
"""


def drill_server(rounds):
    url = create_db("drill_server", NOTES_DDL + EFFECTS_DDL)
    store = os.path.join(WORK, "server-store")
    template = os.path.join(WORK, "notes-server.yml")
    open(template, "w").write(NOTES_YML)
    if ferry("publish", "--config", template, "--database-url", url, "--store", store).returncode != 0:
        raise RuntimeError("publish failed")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = serve(store, template, url, port)
    devices = [os.path.join(WORK, f"dev{i}") for i in range(4)]
    for d in devices:
        if ferry("fetch", "--server", base, "--dataset", "notes", "--dir", d, "--apply").returncode != 0:
            raise RuntimeError("device fetch failed")
    inserted = set()
    owned = {d: [] for d in devices}  # rows each device inserted and the server acknowledged (updated in later rounds)
    updates = 0
    try:
        for r in range(rounds):
            for i, d in enumerate(devices):
                # Each device appends to the body of two of its own acknowledged rows: one change, one effect each.
                for note_id in RNG.sample(owned[d], min(2, len(owned[d]))):
                    if ferry("exec", "--dir", d, f"UPDATE notes SET body = body || ' u{r}' WHERE id = '{note_id}'").returncode == 0:
                        updates += 1
                fresh = []
                for k in range(5):
                    new_id = str(uuid.uuid4())
                    if ferry("exec", "--dir", d, f"INSERT INTO notes (id, body, pad, created_at, updated_at) VALUES ('{new_id}', 'r{r} d{i} k{k}', 'x', '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z')").returncode == 0:
                        inserted.add(new_id)
                        fresh.append(new_id)
                owned[d].extend(fresh)
            pushes = [start("push", "--server", base, "--dataset", "notes", "--dir", d, "--batch-size", "3") for d in devices]
            time.sleep(RNG.uniform(0, 0.6))
            KILLS["server"]["during pushes" if any(p.poll() is None for p in pushes) else "after pushes"] += 1
            kill9(server)
            for p in pushes:
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    kill9(p)
            server = serve(store, template, url, port)
            for attempt in range(5):  # the devices retry until their queues are empty
                left = 0
                for d in devices:
                    ferry("push", "--server", base, "--dataset", "notes", "--dir", d)
                    con = sqlite3.connect(os.path.join(d, "database.db"))
                    left += con.execute("SELECT count(*) FROM ferry_outbox").fetchone()[0]
                    con.close()
                if left == 0:
                    break
            if left:
                violation("server", f"{left} edits still queued after 5 retries")
        ids = "','".join(inserted)
        have = int(psql(url, f"SELECT count(*) FROM notes WHERE id IN ('{ids}')"))
        if have != len(inserted):
            violation("server", f"{len(inserted) - have} inserted rows are missing in PostgreSQL")
        dupes = psql(url, "SELECT count(*) FROM (SELECT id FROM ferry_changes GROUP BY id HAVING count(*) > 1) d")
        if dupes != "0":
            violation("server", f"{dupes} change ids have more than one row in ferry_changes")
        answered = int(psql(url, "SELECT count(*) FROM ferry_changes"))
        if answered != len(inserted) + updates:
            violation("server", f"ferry_changes has {answered} answers for {len(inserted) + updates} changes")
        # Exactly one effect per change: for every row, as many writes as changes of it answered `applied`.
        wrong = psql(url, """
            SELECT count(*) FROM (
              SELECT coalesce(a.note_id, e.note_id) AS note_id, coalesce(a.n, 0) AS applied, coalesce(e.n, 0) AS effects
              FROM (SELECT result::jsonb->'row'->>'id' AS note_id, count(*) AS n FROM ferry_changes
                    WHERE result::jsonb->>'status' = 'applied' GROUP BY 1) a
              FULL JOIN (SELECT note_id, count(*) AS n FROM note_effects GROUP BY 1) e ON a.note_id = e.note_id) c
            WHERE applied <> effects""")
        if wrong != "0":
            violation("server", f"{wrong} rows were written a different number of times than their changes were applied")
        applied = int(psql(url, "SELECT count(*) FROM ferry_changes WHERE result::jsonb->>'status' = 'applied'"))
        effects = int(psql(url, "SELECT count(*) FROM note_effects"))
        print(f"  server: {len(inserted)} inserts and {updates} updates pushed, {answered} answered, {applied} applied, "
              f"{effects} effects in PostgreSQL", flush=True)
    finally:
        kill9(server)


# ------------------------------------------------------------------------------------------------------- app
# An app on FerryGRDB (Examples/FieldNotes, .automatic): it syncs every 50 ms (patches applied in place under its
# pool, full downloads copied in) and appends " e" to one note's body every 50 ms, printing each committed write.
# Killed at random instants: database.db must pass integrity_check and hold a published version (never a mix), and
# no committed write may be lost: the number of " e" in PostgreSQL, once everything is pushed, is at least the number
# the app printed (and at most one more per kill: a write that committed just before the kill, unprinted).
def drill_app(rounds):
    field_notes = os.path.join(os.path.dirname(ARGS.ferry), "field-notes")
    if not os.path.exists(field_notes):
        raise RuntimeError(f"{field_notes} is missing: build it with swift build --product field-notes")
    url = create_db("drill_app", NOTES_DDL)
    store = os.path.join(WORK, "app-store")
    template = os.path.join(WORK, "notes-app.yml")
    open(template, "w").write(NOTES_YML)
    if ferry("publish", "--config", template, "--database-url", url, "--store", store).returncode != 0:
        raise RuntimeError("publish failed")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = serve(store, template, url, port)
    device = os.path.join(WORK, "app-device")
    target = psql(url, "SELECT id FROM notes ORDER BY id LIMIT 1")
    printed = 0
    published = {}
    published_files(store, "notes", published)

    def run_app(seconds):
        return subprocess.Popen(
            [field_notes, "--dir", device, "--server", base, "--dataset", "notes", "--watch", "SELECT count(*) FROM notes",
             "--edit", f"UPDATE notes SET body = body || ' e' WHERE id = '{target}'", "--edit-every", "0.05",
             "--sync-every", "0.05", "--seconds", str(seconds)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    try:
        for r in range(rounds):
            # The office changes 1 % of the other notes and publishes: the app takes it by patch, in place.
            psql(url, f"UPDATE notes SET body = 'office {r} ' || id, updated_at = now() WHERE id <> '{target}' AND abs(hashtext(id || '{r}')) % 100 = 0")
            if ferry("publish", "--config", template, "--database-url", url, "--store", store).returncode != 0:
                violation("app", "publish failed")
            published_files(store, "notes", published)
            app = run_app(30)
            PROCS.append(app)
            time.sleep(RNG.uniform(0.3, 2.5))
            finished = app.poll() is not None
            kill9(app)
            out = app.stdout.read()
            printed += out.count("wrote an edit")
            KILLS["app"]["finished" if finished else ("after the initial sync" if "observed:" in out else "before the first view")] += 1
            db = os.path.join(device, "database.db")
            if not os.path.exists(db):
                continue
            con = sqlite3.connect(db)
            try:
                if con.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
                    violation("app", "database.db fails integrity_check")
                tables = con.execute("SELECT count(*) FROM sqlite_master WHERE name = 'ferry_origin'").fetchone()[0]
                sha = con.execute("SELECT sha256 FROM ferry_origin").fetchone()[0] if tables else None
                if tables and sha not in published:
                    violation("app", f"database.db claims a version that was never published ({sha})")
                elif tables:
                    # Every note but the app's own is exactly as published in the version it claims.
                    expected = [row for row in rows(published[sha]) if row[0] != target]
                    actual = [row for row in rows(db) if row[0] != target]
                    if expected != actual:
                        violation("app", "database.db does not hold exactly its published version's rows")
            except sqlite3.Error as e:
                violation("app", f"database.db cannot be read after the kill: {e}")
            finally:
                con.close()
        # The last run pushes everything: every printed write must be in PostgreSQL.
        app = run_app(3)
        PROCS.append(app)
        out, _ = app.communicate(timeout=60)
        printed += out.count("wrote an edit")
        status = ferry("push", "--server", base, "--dataset", "notes", "--dir", device)
        if status.returncode != 0:
            violation("app", f"the final push failed: {status.stderr.strip()[:200]}")
        body = psql(url, f"SELECT body FROM notes WHERE id = '{target}'")
        in_postgres = body.count(" e")
        kills = sum(KILLS["app"].values())
        if in_postgres < printed:
            violation("app", f"{printed - in_postgres} writes the app committed are missing in PostgreSQL")
        if in_postgres > printed + kills:
            violation("app", f"PostgreSQL has {in_postgres} writes, more than the {printed} printed plus one per kill")
        print(f"  app: {printed} writes printed, {in_postgres} in PostgreSQL, {kills} kills", flush=True)
    finally:
        kill9(server)


# ------------------------------------------------------------------------------------------------- attachments
# A device attaches a photo (1-3 MiB) and names it in a row, then `ferry push` runs through a relay that throttles the
# upload (so kills land inside it) and is killed with -9 at a random instant. After each kill: no row in PostgreSQL
# names a photo the server does not hold (a row never arrives before its photo); every attachment the server holds
# has exactly the bytes its name says (nothing half-written is visible); every photo the device still queues is
# intact on the device. At the end an unkilled push delivers everything: each photo held once, each row once.
PHOTOS_DDL = """CREATE TABLE photos (id text PRIMARY KEY, note text NOT NULL, image text,
  created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now());"""
PHOTOS_YML = """dataset: photos
tables:
  - name: photos
    writable: true
    attachments:
      image: {download: eager}
"""


def check_attachments(url, store, device, attached):
    held_dir = os.path.join(store, "photos", "attachments")
    held = {n for n in os.listdir(held_dir) if len(n) == 64} if os.path.isdir(held_dir) else set()
    for name in held:
        if sha256(os.path.join(held_dir, name)) != name:
            violation("attachments", f"the server holds attachment {name[:12]}… with other bytes than its name says")
    for image in psql(url, "SELECT image FROM photos WHERE image IS NOT NULL").split():
        if image not in held:
            violation("attachments", f"a row in PostgreSQL names photo {image[:12]}…, which the server does not hold")
    local = os.path.join(device, ".ferry", "attachments")
    for name in attached:
        path = os.path.join(local, name)
        if name not in held and not (os.path.exists(path) and sha256(path) == name):
            violation("attachments", f"photo {name[:12]}… is neither on the server nor intact on the device")
    return held


def drill_attachments(rounds):
    url = create_db("drill_attachments", PHOTOS_DDL)
    store = os.path.join(WORK, "attach-store")
    template = os.path.join(WORK, "photos.yml")
    open(template, "w").write(PHOTOS_YML)
    if ferry("publish", "--config", template, "--database-url", url, "--store", store).returncode != 0:
        raise RuntimeError("publish failed")
    port = free_port()
    server = serve(store, template, url, port)
    device = os.path.join(WORK, "attach-device")
    if ferry("fetch", "--server", f"http://127.0.0.1:{port}", "--dataset", "photos", "--dir", device, "--apply").returncode != 0:
        raise RuntimeError("initial fetch failed")
    port_file = os.path.join(WORK, "relay.port")
    relay = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "relay.py"), "--target", str(port),
                              "--port-file", port_file, "--stats", os.path.join(WORK, "relay.json"), "--rate", "4M"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    PROCS.append(relay)
    for _ in range(200):
        if os.path.exists(port_file):
            break
        time.sleep(0.05)
    via = f"http://127.0.0.1:{open(port_file).read()}"
    attached = []
    try:
        for r in range(rounds):
            photo = os.path.join(WORK, f"photo-{r}.jpg")
            with open(photo, "wb") as f:
                f.write(os.urandom(RNG.randint(1 << 20, 3 << 20)))
            out = ferry("attach", "--dir", device, photo, "--json")
            if out.returncode != 0:
                violation("attachments", f"ferry attach failed: {out.stderr.strip()[:200]}")
                continue
            name = json.loads(out.stdout)["sha256"]
            attached.append(name)
            wrote = ferry("exec", "--dir", device, f"INSERT INTO photos (id, note, image) VALUES ('{uuid.uuid4()}', 'photo {r}', '{name}')")
            if wrote.returncode != 0:
                raise RuntimeError(f"ferry exec failed: {wrote.stderr.strip()[:300]}")
            p = start("push", "--server", via, "--dataset", "photos", "--dir", device)
            time.sleep(RNG.uniform(0.05, 1.2))
            finished = p.poll() is not None
            kill9(p)
            queue = os.path.join(device, ".ferry", "attachments", "queue")
            pending = os.path.isdir(queue) and any(n.endswith(".json") for n in os.listdir(queue))
            KILLS["attachments"]["finished" if finished else ("uploading" if pending else "pushing edits")] += 1
            check_attachments(url, store, device, attached)
        done = ferry("push", "--server", f"http://127.0.0.1:{port}", "--dataset", "photos", "--dir", device, "--json")
        print(f"  attachments: the final push: {done.stdout.strip()[:300]}", flush=True)
        if done.returncode != 0:
            violation("attachments", f"the final push failed: {done.stderr.strip()[:200]}")
        held = check_attachments(url, store, device, attached)
        missing = [n for n in attached if n not in held]
        if missing:
            violation("attachments", f"{len(missing)} photos never reached the server")
        count = int(psql(url, "SELECT count(*) FROM photos"))
        if count != len(attached):
            violation("attachments", f"PostgreSQL has {count} photo rows for {len(attached)} attached")
    finally:
        kill9(relay)
        kill9(server)


def main():
    kinds = [k.strip() for k in ARGS.kinds.split(",") if k.strip()]
    print(f"drill: {ARGS.rounds} rounds per kind ({', '.join(kinds)}), seed {SEED}", flush=True)
    started = time.time()
    try:
        for kind in kinds:
            t = time.time()
            {"publisher": drill_publisher, "lines": drill_lines, "s3publisher": drill_s3publisher, "client": drill_client, "server": drill_server, "app": drill_app, "attachments": drill_attachments}[kind](ARGS.rounds)
            print(f"  {kind}: {ARGS.rounds} rounds in {time.time() - t:.0f} s", flush=True)
    finally:
        for p in PROCS:
            if p.poll() is None:
                kill9(p)
        shutil.rmtree(WORK, ignore_errors=True)
    print()
    print(f"{'kind':<10} {'rounds':>6}  {'kills by phase':<60} {'violations':>10}")
    for kind in kinds:
        phases = ", ".join(f"{k} {v}" for k, v in sorted(KILLS[kind].items()))
        print(f"{kind:<10} {ARGS.rounds:>6}  {phases:<60} {VIOLATIONS[kind]:>10}")
    total = sum(VIOLATIONS.values())
    print(f"drill: {len(kinds) * ARGS.rounds} rounds, {sum(sum(c.values()) for c in KILLS.values())} kills, {total} violations ({time.time() - started:.0f} s, seed {SEED})")
    sys.exit(1 if total else 0)


main()
