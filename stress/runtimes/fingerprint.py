"""What a built stack IS, by content: the sha256 of every library and GPU code object its ROCm
side ships (an unpacked tarball's tree, or the `_rocm_sdk_*` packages of a wheel venv), with
its IREE side (what pip resolved, less the ROCm packages), its env and the compiler of its
artifacts. Two consecutive nightlies with the same fingerprint are the same stack (TheRock#5763
found byte-identical libamdhip64 builds on consecutive nightlies): bisect tests them once.
Version stamps (the TheRock manifest, `.info/version`, cmake and pkg-config files) are left
out: they differ in every build and no process loads them.

The files' hashes are kept in the tree (`.fingerprint.json`), so a tree is hashed once.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stress.fs import atomic_write, sha256_file

LOADED = re.compile(r"\.so(\.[0-9][0-9A-Za-z.]*)?$|\.(co|hsaco|dat|kpack|msgpack)$")
#   what a process maps or reads as code: shared libraries (libLLVM.so.20.0git too) and GPU
#   code objects (rocBLAS / hipBLASLt kernel files), not headers, cmake or version files
CACHE_FILE: str = ".fingerprint.json"
MANIFEST_PATH: str = "share/therock/therock_manifest.json"  # in a tarball's tree; in a wheel
#   venv under site-packages/_rocm_sdk_core/
_ROCM_PACKAGE = re.compile(r"(?i)^(rocm|rocm[-_]sdk[-_a-z0-9]*)==")


@dataclass(frozen=True)
class Fingerprint:
    """A stack's content: `digest` equal means the same stack."""

    digest: str
    files: dict[str, str] = field(default_factory=dict)  # ROCm file (relative) -> sha256
    roots: tuple[str, ...] = ()  # the ROCm trees hashed
    iree_side: tuple[str, ...] = ()  # freeze lines, less the ROCm packages
    sources: dict[str, str] = field(default_factory=dict)  # tarball / wheel file -> sha256

    @property
    def rocm_side(self) -> bool:
        return bool(self.roots)

    def as_dict(self) -> dict[str, Any]:
        return {"digest": self.digest, "roots": list(self.roots), "files": len(self.files),
                "libraries": {k: v for k, v in self.files.items() if ".so" in k},
                "sources": self.sources}


def tree_hashes(root: Path) -> dict[str, str]:
    """Relative path -> sha256 of each library and code object under `root` (symlinks are
    names of files already counted: left out). Kept in root/.fingerprint.json, keyed by the
    files' sizes and mtimes, so an unchanged tree is read once."""
    found = {}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            full = os.path.join(dirpath, f)
            if LOADED.search(f) and not os.path.islink(full):
                st = os.stat(full)
                found[os.path.relpath(full, root)] = (st.st_size, st.st_mtime_ns)
    stamp = hashlib.sha256(json.dumps(sorted(found.items())).encode()).hexdigest()
    cache = root / CACHE_FILE
    try:
        kept = json.loads(cache.read_text())
        if kept.get("stamp") == stamp:
            return dict(kept["files"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    hashes = {rel: sha256_file(root / rel) for rel in sorted(found)}
    try:
        atomic_write(cache, json.dumps({"stamp": stamp, "files": hashes}, indent=0).encode())
    except OSError:
        pass  # a read-only tree (a user's /opt/rocm): hashed again next time
    return hashes


def rocm_roots(built: Any) -> list[Path]:
    """The ROCm trees of a built stack: a tarball's or folder's tree (the HIP library's
    lib/ parent), or the `_rocm_sdk_*` packages in its venv."""
    stack = built.stack
    if stack.rocm and built.hip_library:
        lib = Path(built.hip_library).parent
        return [lib.parent if lib.name == "lib" else lib]
    if stack.rocm_requirements and built.venv:
        return sorted(p for p in Path(built.venv).glob("lib/python*/site-packages/_rocm_sdk*")
                      if p.is_dir())
    return []


def _file_sha(path: str) -> str:
    """A file's sha256; a download kept by `iree-stress stacks` is named by it
    (downloads/sha256/<hash>/<name>: a multi-GB tarball is not read again)."""
    real = Path(os.path.realpath(path))
    if real.parent.parent.name == "sha256" and re.fullmatch(r"[0-9a-f]{64}", real.parent.name):
        return real.parent.name
    return sha256_file(path)


def sources(built: Any) -> dict[str, str]:
    """The tarball, or the saved wheels, the stack was built from -> sha256."""
    stack = built.stack
    out: dict[str, str] = {}
    if stack.rocm and os.path.isfile(stack.rocm):
        out[os.path.basename(stack.rocm)] = _file_sha(stack.rocm)
    for folder in stack.find_links:
        if os.path.isdir(folder):
            for f in sorted(os.listdir(folder)):
                if f.lower().startswith("rocm"):
                    out[f] = _file_sha(os.path.join(folder, f))
    return out


def of(built: Any) -> Fingerprint:
    """The fingerprint of a built stack (provision.Built)."""
    roots = rocm_roots(built)
    files: dict[str, str] = {}
    for root in roots:
        prefix = f"{root.name}/" if len(roots) > 1 else ""
        files.update({prefix + k: v for k, v in tree_hashes(root).items()})
    iree = tuple(sorted(x for x in built.freeze if x.strip() and not _ROCM_PACKAGE.match(x)))
    blob = json.dumps({"files": files, "iree": iree, "env": sorted(built.stack.env),
                       "python": built.stack.python, "rocm_side": bool(roots),
                       "compiler": built.stack.compiler}, sort_keys=True)  # (its artifacts)
    return Fingerprint(hashlib.sha256(blob.encode()).hexdigest(), files,
                       tuple(str(r) for r in roots), iree, sources(built))


def content_facts(built: Any, manifest: Mapping[str, Any]) -> dict[str, Any]:
    """What a trial's stack.json records of the stack's content: the sha256 of the HIP, HSA
    and IREE runtime libraries its workers mapped (none under --engine exec: no worker of
    ours ran), and the stack's fingerprint (its tarball or wheels, its libraries)."""
    return {"library_hashes": manifest.get("library_hashes") or {},
            "fingerprint": of(built).as_dict()}


def therock_manifest(fp: Fingerprint) -> Mapping[str, Any] | None:
    """The TheRock manifest of the stack's ROCm side (the component commits it was built
    from), when it ships one."""
    for root in fp.roots:
        for candidate in (Path(root) / MANIFEST_PATH, Path(root).parent / MANIFEST_PATH):
            try:
                data = json.loads(candidate.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(data, dict):
                return data
    return None
