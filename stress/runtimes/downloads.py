"""Downloads kept by content: each file fetched once into `CACHE/downloads/sha256/<hash>/<name>`
and a record of where it came from (`CACHE/downloads/urls/<key>.json`: url, sha256, size, the
index that listed it, its version). Nightlies get deleted from their index after a while; what
was downloaded stays, so a stacks file naming it keeps working, and `iree-stress stacks` lists
a build its index no longer shows as long as its download is here. `iree-stress clean --cache`
never removes this folder (it removes stack venvs and artifacts only).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from stress.errors import UsageError
from stress.fs import atomic_write, new_file_mode

DOWNLOADS_DIR: str = "downloads"  # under the user cache dir, beside stacks/ and artifacts
CHUNK: int = 1 << 20  # read and hash a megabyte at a time: a TheRock tarball is GBs
DOWNLOAD_TIMEOUT_S: float = 120.0  # a socket silent for two minutes: the transfer is dead
PROGRESS_EVERY_S: float = 2.0  # status line updates while a download runs


class DownloadError(UsageError):
    """A listed file could not be fetched (and no earlier download of it is kept): the tool's
    environment, not a bad command line, so exit 3 as any harness failure."""

    exit_code = 3


@dataclass(frozen=True)
class Record:
    """Where one kept download came from."""

    url: str
    sha256: str
    size: int
    name: str
    index: str = ""
    version: str = ""
    family: str = ""
    fetched: str = ""  # UTC time of the download

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


class Downloads:
    """The download cache under `cache_dir`."""

    def __init__(self, cache_dir: Path):
        self.root = Path(cache_dir).expanduser().absolute() / DOWNLOADS_DIR  # (a stacks
        #   file names its downloads by this path, read relative to ITS folder, not the cwd)

    def blob(self, sha: str, name: str) -> Path:
        return self.root / "sha256" / sha / name

    def _record_path(self, url: str) -> Path:
        return self.root / "urls" / f"{hashlib.sha256(url.encode()).hexdigest()[:32]}.json"

    def record(self, url: str) -> Record | None:
        """The record of `url`'s download, if one is kept and its file is still here."""
        try:
            r = Record(**json.loads(self._record_path(url).read_text()))
        except (OSError, ValueError, TypeError):
            return None
        return r if self.blob(r.sha256, r.name).is_file() else None

    def recorded(self, index: str) -> list[Record]:
        """Every kept download that `index` listed (those it may no longer list)."""
        out = []
        for p in sorted((self.root / "urls").glob("*.json")):
            try:
                r = Record(**json.loads(p.read_text()))
            except (OSError, ValueError, TypeError):
                continue
            if r.index == index and self.blob(r.sha256, r.name).is_file():
                out.append(r)
        return out

    def get(self, url: str, name: str, size: int = -1, index: str = "", version: str = "",
            family: str = "", say: Callable[[str], None] | None = None) -> Record:
        """`url`'s file, downloaded unless a download of it is kept (and, when the listing
        gives a size, of that size)."""
        kept = self.record(url)
        if kept is not None and (size < 0 or kept.size == size):
            return kept
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".part-", dir=self.root)
        except OSError as exc:
            raise DownloadError(f"cannot keep downloads in {self.root}: "
                                f"{exc.strerror or exc}") from None
        h, got, started, shown = hashlib.sha256(), 0, time.monotonic(), 0.0
        try:
            with os.fdopen(fd, "wb") as out, \
                    urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as r:  # noqa: S310  # the user's index
                while chunk := r.read(CHUNK):
                    out.write(chunk)
                    h.update(chunk)
                    got += len(chunk)
                    now = time.monotonic()
                    if say is not None and now - shown >= PROGRESS_EVERY_S:
                        shown = now
                        total = f" of {size / 1e6:.0f} MB" if size > 0 else ""
                        say(f"downloading {name}: {got / 1e6:.0f} MB{total}, "
                            f"{now - started:.0f} s")
            if 0 <= size != got:
                raise OSError(f"got {got} bytes, the listing says {size}")
            sha = h.hexdigest()
            dest = self.blob(sha, name)
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.chmod(tmp, new_file_mode())
            os.replace(tmp, dest)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            if kept is not None:  # the index changed its mind about the size: keep ours
                return kept
            reason = getattr(exc, "reason", None) or exc
            raise DownloadError(f"cannot download {url}: {reason}") from None
        finally:
            if os.path.exists(tmp):  # (failed or interrupted: no part file stays behind)
                os.unlink(tmp)
        rec = Record(url, sha, got, name, index, version, family,
                     time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        atomic_write(self._record_path(url), json.dumps(rec.as_dict(), indent=1).encode())
        return rec
