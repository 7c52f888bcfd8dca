"""What a run folder looks like to the other users of a shared results folder and to a CI
artifact upload: every file readable as the umask says (issue 28 item 8: summary.json and
evidence were 0600; replays that IREE writes itself are 0640)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

_READ: int = 0o444
_SEARCH: int = 0o111
_SHARED: int = 0o055  # the group's and others' read and search bits: a umask must leave them


def unreadable(folder: Path) -> dict[str, str]:
    """Each file and folder under `folder` (itself included) that others may read less of
    than of a file (or folder) made with this umask: 0644 and 0755 under the usual 022 give
    the group and others read (and a folder's search) access. Path -> its mode, in octal."""
    umask = os.umask(0)
    os.umask(umask)
    # (under 077, say, nothing need be readable by others and any mode passes: the run under
    #   test is started with the usual 022, the `usual_umask` fixture)
    assert umask & _SHARED == 0, f"umask {umask:03o} hides files from others: use usual_umask"
    out: dict[str, str] = {}
    for path in [folder, *sorted(folder.rglob("*"))]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if path.is_symlink():
            continue
        need = (_READ | _SEARCH if path.is_dir() else _READ) & ~umask
        if mode & need != need:
            out[str(path.relative_to(folder))] = oct(mode)
    return out
