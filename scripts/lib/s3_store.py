#!/usr/bin/env python3
"""A snapshot store in a bucket, read with botocore (an independent S3 client, not Ferry's).

  s3_store.py create-bucket BUCKET
      creates the bucket (Ferry never creates the store's bucket).
  s3_store.py check s3://BUCKET/PREFIX [--mirror DIR] [--strict]
      checks every dataset's manifest.json in the bucket: it parses, and every object it names exists with the
      right SHA-256 (`<sha256>.sqlite` by its bytes, `<sha256>.sqlite.gz` by the bytes it inflates to,
      `<sha256>.patch.gz` by its own bytes). With --mirror, writes the checked store into DIR in the same layout
      (what scripts/scale's driver reads as the published truth). With --strict, also fails on leftovers: an
      object in objects/ that the manifest does not name (other than the row index `<sha256>.rows` of a named
      snapshot) or a multipart upload in progress (scripts/drill, after a run with --object-grace 0s). Prints one
      line per dataset; exits 1 on any violation, naming the key.
  s3_store.py state s3://BUCKET/PREFIX DATASET
      prints {"manifest": SHA-256 of manifest.json or null, "objects": N, "uploads": N} (the drill's phase of a kill).

Endpoint and identity: FERRY_TEST_S3_ENDPOINT, FERRY_TEST_S3_ACCESS_KEY, FERRY_TEST_S3_SECRET_KEY (what
ferry_start_seaweedfs exports). Installs botocore into .build/s3-venv like sigv4_check.py.
"""
import hashlib
import json
import os
import subprocess
import sys
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV = os.path.join(ROOT, ".build", "s3-venv")


def client():
    import botocore.session
    from botocore.config import Config

    missing = [n for n in ("FERRY_TEST_S3_ENDPOINT", "FERRY_TEST_S3_ACCESS_KEY", "FERRY_TEST_S3_SECRET_KEY")
               if not os.environ.get(n)]
    if missing:
        sys.exit(f"{', '.join(missing)} not set: start SeaweedFS with ferry_start_seaweedfs (scripts/lib/common.sh)")
    return botocore.session.get_session().create_client(
        "s3", endpoint_url=os.environ["FERRY_TEST_S3_ENDPOINT"], region_name="us-east-1",
        aws_access_key_id=os.environ["FERRY_TEST_S3_ACCESS_KEY"],
        aws_secret_access_key=os.environ["FERRY_TEST_S3_SECRET_KEY"],
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3}))


def parse_url(url):
    if not url.startswith("s3://"):
        sys.exit(f"{url}: not an s3://BUCKET/PREFIX URL")
    bucket, _, prefix = url[len("s3://"):].partition("/")
    prefix = prefix.strip("/")
    return bucket, (prefix + "/" if prefix else "")


def list_keys(s3, bucket, prefix):
    keys, token = [], None
    while True:
        args = {"Bucket": bucket, "Prefix": prefix}
        if token:
            args["ContinuationToken"] = token
        page = s3.list_objects_v2(**args)
        keys += [o["Key"] for o in page.get("Contents", [])]
        if not page.get("IsTruncated"):
            return keys
        token = page["NextContinuationToken"]


def stream_sha256(body, inflate=False):
    """SHA-256 of a streamed body (of what it inflates to, with inflate), and the raw bytes' count."""
    digest, raw = hashlib.sha256(), 0
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS) if inflate else None
    chunks = []
    for chunk in iter(lambda: body.read(1 << 20), b""):
        raw += len(chunk)
        chunks.append(chunk)
        if inflater is not None:
            while chunk:
                digest.update(inflater.decompress(chunk))
                # A gzip file of several members (Ferry's parallel gzip writes one per chunk): go on after each.
                chunk = inflater.unused_data
                if chunk:
                    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        else:
            digest.update(chunk)
    if inflater is not None:
        digest.update(inflater.flush())
    return digest.hexdigest(), raw, b"".join(chunks)


def referenced(manifest):
    """Every object name a stored manifest names: each retained checkpoint's file and gzip copy, each step (of the
    history too) and each patch (docs/delta.md: a version stored as a step has no file in the bucket)."""
    names = set()
    for entry in manifest.get("scopes", []):
        for record in (entry.get("history") or []) + entry.get("retained", []):
            if record.get("checkpoint", "step" not in record):
                names.add(f"{record['sha256']}.sqlite")
                names.add(f"{record['sha256']}.sqlite.gz")
            if record.get("step"):
                names.add(f"{record['step']['sha256']}.patch.gz")
            for patch in record.get("patches", []) or []:
                names.add(f"{patch['sha256']}.patch.gz")
    return names


def uploads(s3, bucket, prefix):
    return [u["Key"] for u in s3.list_multipart_uploads(Bucket=bucket, Prefix=prefix).get("Uploads", [])]


def state(url, dataset):
    s3 = client()
    bucket, prefix = parse_url(url)
    try:
        body = s3.get_object(Bucket=bucket, Key=f"{prefix}{dataset}/manifest.json")["Body"].read()
        manifest = hashlib.sha256(body).hexdigest()
    except s3.exceptions.NoSuchKey:
        manifest = None
    print(json.dumps({"manifest": manifest, "objects": len(list_keys(s3, bucket, f"{prefix}{dataset}/objects/")),
                      "uploads": len(uploads(s3, bucket, f"{prefix}{dataset}/"))}))
    return 0


def check(url, mirror, strict=False):
    s3 = client()
    bucket, prefix = parse_url(url)
    manifests = sorted(k for k in list_keys(s3, bucket, prefix)
                       if k.endswith("/manifest.json") and k[len(prefix):].count("/") == 1)
    if not manifests:
        print(f"s3://{bucket}/{prefix}: no dataset has a manifest.json", file=sys.stderr)
        return 1
    failures = 0
    for key in manifests:
        dataset = key[len(prefix):].split("/")[0]
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        try:
            manifest = json.loads(body)
        except ValueError as error:
            print(f"s3://{bucket}/{key}: not JSON ({error})", file=sys.stderr)
            failures += 1
            continue
        names = referenced(manifest)
        existing = {k.rsplit("/", 1)[1] for k in list_keys(s3, bucket, f"{prefix}{dataset}/objects/")}
        moved = 0
        for name in sorted(names):
            object_key = f"{prefix}{dataset}/objects/{name}"
            if name not in existing:
                print(f"s3://{bucket}/{object_key}: named by the manifest but missing", file=sys.stderr)
                failures += 1
                continue
            sha, size, data = stream_sha256(s3.get_object(Bucket=bucket, Key=object_key)["Body"],
                                            inflate=name.endswith(".sqlite.gz"))
            expected = name.split(".", 1)[0]
            if sha != expected:
                print(f"s3://{bucket}/{object_key}: SHA-256 {sha}, its name says {expected}", file=sys.stderr)
                failures += 1
                continue
            moved += size
            if mirror:
                path = os.path.join(mirror, dataset, "objects", name)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path + ".tmp", "wb") as out:
                    out.write(data)
                os.replace(path + ".tmp", path)
        if mirror:
            path = os.path.join(mirror, dataset, "manifest.json")
            with open(path + ".tmp", "wb") as out:
                out.write(body)
            os.replace(path + ".tmp", path)
        if strict:
            snapshots = {n.split(".", 1)[0] for n in names if n.endswith(".sqlite")}
            for name in sorted(existing - names):
                if not (name.endswith(".rows") and name.split(".", 1)[0] in snapshots):
                    print(f"s3://{bucket}/{prefix}{dataset}/objects/{name}: a leftover no manifest names",
                          file=sys.stderr)
                    failures += 1
            for key in uploads(s3, bucket, f"{prefix}{dataset}/"):
                print(f"s3://{bucket}/{key}: a multipart upload left in progress", file=sys.stderr)
                failures += 1
        versions = sorted({r["version"] for e in manifest.get("scopes", []) for r in e.get("retained", [])})
        print(f"s3://{bucket}/{key}: versions {versions}, {len(names)} objects named, all present with the right "
              f"SHA-256 ({moved / 1e6:.1f} MB read), {len(existing - names)} more in objects/")
    return 1 if failures else 0


def main():
    if os.path.realpath(sys.prefix) != os.path.realpath(VENV):
        subprocess.run(["bash", "-c", f'. "{ROOT}/scripts/lib/common.sh" && cd "{ROOT}" && ferry_s3_venv'],
                       check=True, stdout=subprocess.DEVNULL)
        python = os.path.join(VENV, "bin", "python")
        os.execv(python, [python, os.path.abspath(__file__)] + sys.argv[1:])
    args = sys.argv[1:]
    if len(args) == 2 and args[0] == "create-bucket":
        client().create_bucket(Bucket=args[1])
        return 0
    if len(args) == 3 and args[0] == "state":
        return state(args[1], args[2])
    if len(args) >= 2 and args[0] == "check":
        rest, mirror, strict = args[2:], None, False
        while rest:
            if rest[0] == "--strict":
                strict, rest = True, rest[1:]
            elif rest[0] == "--mirror" and len(rest) > 1:
                mirror, rest = rest[1], rest[2:]
            else:
                print(__doc__, file=sys.stderr)
                return 2
        return check(args[1], mirror, strict)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
