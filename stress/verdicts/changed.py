"""What changed between the last good and the first bad stack, ready to paste into an upstream
issue: the packages (each stack venv's pip freeze), the tarball or wheels (sha256), the
libraries and code objects that differ (runtimes.fingerprint), and, when the ROCm side ships a
TheRock manifest, each component's commit range (`rocm-systems 683a63d9..fd61b0f5`) with a
compare link.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from stress.runtimes.fingerprint import Fingerprint, therock_manifest

SHOWN: int = 8  # differing libraries named; the rest counted (a new nightly can change
#   hundreds of kernel files: the HIP and HSA libraries matter first)
SHORT: int = 8  # hex digits of a hash or commit in a line (git's short form is 7-8)
_FIRST = ("libamdhip64", "libhsa-runtime64", "libamd_comgr", "librocprofiler")
_PIN = re.compile(r"^([A-Za-z0-9_.\-\[\],]+)==(.+)$")


def _packages(freeze: Sequence[str]) -> dict[str, str]:
    out = {}
    for line in freeze:
        m = _PIN.match(line.strip())
        if m:
            out[m.group(1).lower()] = m.group(2)
    return out


def package_lines(good: Sequence[str], bad: Sequence[str]) -> list[str]:
    a, b = _packages(good), _packages(bad)
    out = [f"{n} {a.get(n, '(none)')} -> {b.get(n, '(none)')}"
           for n in sorted(set(a) | set(b)) if a.get(n) != b.get(n)]
    return out


def _rank(path: str) -> tuple[int, str]:
    name = path.rsplit("/", 1)[-1]
    return next((i for i, k in enumerate(_FIRST) if name.startswith(k)), len(_FIRST)), path


def library_line(good: Mapping[str, str], bad: Mapping[str, str]) -> str:
    changed = sorted((p for p in set(good) & set(bad) if good[p] != bad[p]), key=_rank)
    added = sorted(set(bad) - set(good), key=_rank)
    gone = sorted(set(good) - set(bad), key=_rank)
    same = len(set(good) & set(bad)) - len(changed)
    if not (changed or added or gone):
        return f"libraries: all {same} the same"
    parts = [f"{p} {good[p][:SHORT]} -> {bad[p][:SHORT]}" for p in changed[:SHOWN]]
    parts += [f"{p} new" for p in added[:max(0, SHOWN - len(parts))]]
    parts += [f"{p} gone" for p in gone[:max(0, SHOWN - len(parts))]]
    rest = len(changed) + len(added) + len(gone) - len(parts)
    return (f"libraries: {len(changed)} differ, {len(added)} new, {len(gone)} gone, {same} the "
            f"same: {'; '.join(parts)}{f'; and {rest} more' if rest else ''}")


def _pins(manifest: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """Component -> (commit, repository URL) from a TheRock manifest: the format of
    build_tools/generate_therock_manifest.py (the_rock_commit, submodules[] with
    submodule_name, submodule_url, pin_sha), or the v1 schema's (TheRock.commit,
    submodules[] with path, url, commit)."""
    out: dict[str, tuple[str, str]] = {}
    rock = manifest.get("the_rock_commit") or (manifest.get("TheRock") or {}).get("commit")
    if rock:
        out["TheRock"] = (str(rock), "https://github.com/ROCm/TheRock")
    for sub in manifest.get("submodules") or []:
        if not isinstance(sub, dict):
            continue
        name = sub.get("submodule_name") or sub.get("name") or sub.get("path") or \
            sub.get("submodule_path")
        sha = sub.get("pin_sha") or sub.get("commit")
        if name and sha:
            out[str(name)] = (str(sha), str(sub.get("submodule_url") or sub.get("url") or ""))
    return out


def _compare_url(url: str, old: str, new: str) -> str:
    url = re.sub(r"\.git$", "", url.rstrip("/"))
    return f"{url}/compare/{old}...{new}" if url.startswith("https://github.com/") else ""


def component_lines(good: Mapping[str, Any] | None, bad: Mapping[str, Any] | None) -> list[str]:
    if good is None or bad is None:
        which = "either stack" if good is None and bad is None else \
            ("the last good stack" if good is None else "the first bad stack")
        return [f"components: no TheRock manifest in {which}"]
    a, b = _pins(good), _pins(bad)
    moved = [n for n in sorted(set(a) | set(b), key=lambda n: (n != "TheRock", n))
             if a.get(n, ("",))[0] != b.get(n, ("",))[0]]
    if not moved:
        return [f"components: all {len(a)} at the same commits"]
    lines = ["components (TheRock manifest): " + "; ".join(
        f"{n} {a[n][0][:SHORT] if n in a else '(none)'}..{b[n][0][:SHORT] if n in b else '(none)'}"
        for n in moved)]
    for n in moved:
        if n in a and n in b:
            link = _compare_url(b[n][1] or a[n][1], a[n][0], b[n][0])
            if link:
                lines.append(f"  {link}")
    same = len(set(a) & set(b)) - sum(1 for n in moved if n in a and n in b)
    if same:
        lines.append(f"  ({same} other components at the same commits)")
    return lines


def what_changed(good_name: str, good: Any, good_fp: Fingerprint, bad_name: str, bad: Any,
                 bad_fp: Fingerprint) -> list[str]:
    """The lines printed under the answer: `good`/`bad` are provision.Built stacks."""
    lines = [f"WHAT CHANGED  {good_name} (last good) -> {bad_name} (first bad)"]
    pkgs = package_lines(good.freeze, bad.freeze)
    lines.append(f"  packages: {'; '.join(pkgs) if pkgs else 'the same'}")
    src = [f"{n} (sha256 {h[:SHORT]})" for n, h in good_fp.sources.items()
           if n not in bad_fp.sources]
    dst = [f"{n} (sha256 {h[:SHORT]})" for n, h in bad_fp.sources.items()
           if n not in good_fp.sources]
    if src or dst:
        lines.append(f"  built from: {', '.join(src) or '-'} -> {', '.join(dst) or '-'}")
    if good_fp.rocm_side or bad_fp.rocm_side:
        lines.append("  " + library_line(good_fp.files, bad_fp.files))
        lines += ["  " + x for x in component_lines(therock_manifest(good_fp),
                                                    therock_manifest(bad_fp))]
    env = sorted(set(good.stack.env) ^ set(bad.stack.env))
    if env:
        lines.append(f"  env: {', '.join(sorted({k for k, _v in env}))} differ")
    return lines
