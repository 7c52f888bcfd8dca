"""Stacks for system tests that need a stack with its own venv, built in seconds and offline:
one tiny local wheel installed from a folder, no index. It is a stand-in that says so: a
distribution `iree-base-runtime` 0.0.1 (a stack's venv must pin one) whose `iree.runtime`
is an empty module named a test double, no HAL in it; fine for exec-engine commands that
do not import it."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

_DIST, _PKG, _VERSION = "iree-base-runtime", "iree_base_runtime", "0.0.1"


def marker_wheel(folder: Path) -> Path:
    """A valid pure-Python wheel of the stand-in (nothing else in it)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{_PKG}-{_VERSION}-py3-none-any.whl"
    info = f"{_PKG}-{_VERSION}.dist-info"
    files = {"iree/runtime/__init__.py": 'version = "0.0.1 (a test double: no runtime)"\n',
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {_DIST}\nVersion: {_VERSION}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}
    record = []
    for name, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        record.append(f"{name},sha256={digest.decode()},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
        z.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


def venv_stack(name: str, wheels: Path, env: dict[str, str] | None = None) -> str:
    """A stacks-file table for a stack with its own venv holding only the stand-in (no pytest,
    no numpy, no real runtime), installed from `wheels` with no index."""
    marker_wheel(wheels)
    pairs = ", ".join(f'{k} = "{v}"' for k, v in (env or {}).items())
    return (f'[stacks.{name}]\nrequirements = ["{_DIST}=={_VERSION}"]\n'
            f'index_url = "file://{wheels}/no-index"\nfind_links = ["{wheels}"]\n'
            + (f"env = {{ {pairs} }}\n" if pairs else "") + "\n")
