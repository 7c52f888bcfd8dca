"""Files every stage writes or finds: durable files written atomically (a temp file in the same
folder, then a rename: readers see the old file or the whole new one) and the artifact cache's
default folder, so soak, compile, repro and compare resolve the same one. Low in the tree: it
imports nothing of ours (and nothing heavy: the CLI reads the default cache folder at start)."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

ENV_CACHE_DIR = "IREE_STRESS_CACHE"
CACHE_SUBDIR = "iree-stress"  # under XDG_CACHE_HOME (else ~/.cache) when ENV_CACHE_DIR is unset


def default_cache_dir() -> Path:
    """The artifact cache when none is named: $IREE_STRESS_CACHE, else
    $XDG_CACHE_HOME/iree-stress, else ~/.cache/iree-stress (the XDG base directory rules)."""
    env = os.environ.get(ENV_CACHE_DIR)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / CACHE_SUBDIR


def _umask() -> int:
    """The process's umask, read without changing it (os.umask sets it, and another thread
    creating a file meanwhile would get the wrong mode); from /proc, else set and put back."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def new_file_mode() -> int:
    """The mode a file created by open() gets here: 0666 less the umask (mkstemp's own 0600
    hid summaries and evidence from CI artifact uploads and from the other users of a shared
    results folder or cache)."""
    return 0o666 & ~_umask()


def atomic_write(path: Path, data: bytes) -> None:
    """Writes `data` to `path` so that readers see the old file or the whole new one, with
    the mode any new file gets (`new_file_mode`); creates the folder when missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, new_file_mode())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


HASH_CHUNK: int = 1 << 20  # a megabyte at a time: libraries and tarballs run to GBs
_hashed: dict[tuple[str, int, int], str] = {}  # (path, size, mtime) -> sha256, this process


def sha256_file(path: str | os.PathLike[str]) -> str:
    """The sha256 of a file's bytes (hex), remembered for this process by path, size and
    mtime (a manifest hashes the same libraries at every trial)."""
    st = os.stat(path)
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns)
    if key not in _hashed:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(HASH_CHUNK):
                h.update(chunk)
        _hashed[key] = h.hexdigest()
    return _hashed[key]
