"""A simulated index of TheRock nightlies for tests: tarballs with an /opt/rocm-like tree (a
`lib/libamdhip64.so.7`, a TheRock manifest), listed as an S3 ListBucket XML listing (paged, with
continuation tokens) and as an HTML page of links, served over HTTP on 127.0.0.1 from a thread.

    with serve(folder) as base:          # http://127.0.0.1:PORT
        iree-stress stacks --index {base}/bucket/ ...      (S3 XML, 3 keys a page)
        iree-stress stacks --index {base}/index.html ...   (HTML links)
"""

from __future__ import annotations

import gzip
import html
import io
import json
import random
import tarfile
import threading
import urllib.parse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

FAMILY = "gfx94X-dcgpu"
PAGE_KEYS = 3  # keys a page of the S3 listing: several pages for any real test
MANIFEST = "share/therock/therock_manifest.json"


@dataclass
class Nightly:
    """One simulated build: its version, the bytes of its HIP library (equal bytes: an
    identical build), the component pins of its TheRock manifest, its listing date."""

    version: str
    library: bytes = b""
    pins: dict[str, str] = field(default_factory=dict)
    modified: str = ""  # S3 LastModified, e.g. 2025-12-01T10:00:00.000Z
    family: str = FAMILY
    files: dict[str, bytes] = field(default_factory=dict)  # more files in the tree

    @property
    def filename(self) -> str:
        return f"therock-dist-linux-{self.family}-{self.version}.tar.gz"


def manifest_json(version: str, pins: dict[str, str]) -> bytes:
    """A manifest in TheRock's format (build_tools/generate_therock_manifest.py)."""
    return json.dumps({"the_rock_commit": pins.get("TheRock", "0" * 40),
                       "submodules": [{"submodule_name": name, "submodule_path": name,
                                       "submodule_url": f"https://github.com/ROCm/{name}.git",
                                       "pin_sha": sha, "patches": []}
                                      for name, sha in sorted(pins.items())
                                      if name != "TheRock"],
                       "rocm_package_version": version}, indent=2).encode()


def tarball(n: Nightly) -> bytes:
    files = {"lib/libamdhip64.so.7": n.library or f"hip of {n.version}".encode(),
             MANIFEST: manifest_json(n.version, n.pins),
             ".info/version": n.version.encode(), **n.files}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tf.addfile(info, io.BytesIO(data))
    return gzip.compress(buf.getvalue(), mtime=0)  # the same bytes every time


def write_index(folder: Path, nightlies: Sequence[Nightly]) -> None:
    """The tarballs under folder/bucket/, an HTML page of links (folder/index.html) and the
    keys the S3 listing serves (folder/keys.json)."""
    bucket = folder / "bucket"
    bucket.mkdir(parents=True, exist_ok=True)
    for n in nightlies:
        (bucket / n.filename).write_bytes(tarball(n))
    links = "\n".join(f'<a href="bucket/{urllib.parse.quote(n.filename)}">'
                      f"{html.escape(n.filename)}</a><br>" for n in nightlies)
    (folder / "index.html").write_text(f"<html><body>{links}</body></html>")
    (folder / "keys.json").write_text(json.dumps(
        [{"key": n.filename, "modified": n.modified or "2025-01-01T00:00:00.000Z",
          "size": (bucket / n.filename).stat().st_size} for n in nightlies]))


def s3_page(keys: Sequence[dict[str, object]], token: str) -> bytes:
    start = int(token or 0)
    page = keys[start:start + PAGE_KEYS]
    more = start + PAGE_KEYS < len(keys)
    items = "".join(f"<Contents><Key>{html.escape(str(k['key']))}</Key><LastModified>"
                    f"{k['modified']}</LastModified><Size>{k['size']}</Size></Contents>"
                    for k in page)
    nxt = f"<NextContinuationToken>{start + PAGE_KEYS}</NextContinuationToken>" if more else ""
    return (f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.'
            f'amazonaws.com/doc/2006-03-01/"><Name>bucket</Name><KeyCount>{len(page)}'
            f"</KeyCount><IsTruncated>{'true' if more else 'false'}</IsTruncated>{nxt}"
            f"{items}</ListBucketResult>").encode()


@contextmanager
def serve(folder: Path) -> Iterator[str]:
    """folder over HTTP on 127.0.0.1; `/bucket/` (with or without a query) answers as an S3
    ListBucket listing of folder/keys.json. Yields the base URL."""

    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(folder), **kwargs)  # type: ignore[arg-type]

        def do_GET(self) -> None:  # noqa: N802  # http.server's name
            parts = urllib.parse.urlsplit(self.path)
            if parts.path.rstrip("/") == "/bucket":
                query = dict(urllib.parse.parse_qsl(parts.query))
                keys = json.loads((folder / "keys.json").read_text())
                body = s3_page(keys, query.get("continuation-token", ""))
                self.send_response(200)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            super().do_GET()

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="nightly-index", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def stand_in_trials(order: Sequence[str], first_bad: str, p: float) -> type[Any]:
    """A test double of compare.SoakTrials, NOT a soak: a trial of a stack at or after
    `first_bad` in `order` fails with probability `p` (drawn from its stack and seed), one
    before it never; `runs` lists every stack it ran, in order."""
    from stress.verdicts.trials import Trial

    bad = set(order[order.index(first_bad):])

    class StandInTrials:
        runs: list[str] = []

        def __init__(self, base: Any, built: Any, out: Path, log: Any = None):
            pass

        def check(self, stack: str) -> str:
            return ""  # (SoakTrials.check: can the stack run at all? every one can)

        def run(self, stack: str, index: int, seed: int) -> Trial:
            StandInTrials.runs.append(stack)
            failed = stack in bad and random.Random(f"{stack} {seed}").random() < p
            return Trial(stack, index, seed, failed)

    return StandInTrials
