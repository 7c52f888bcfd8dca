"""`iree-stress stacks`: a stacks file written from an index of TheRock builds, one stack per
build between two versions, in build-date order (`listing`), each named by its version:

    iree-stress stacks --index URL --from 7.11.0a20251125 --to 10.0.0a20260105 \\
        [--family gfx94X-dcgpu] [--kind tarball|wheel] [--iree-runtime 3.10.0] -o stacks.toml

A tarball stack is `rocm = "<its download>"`; a wheel stack is `rocm_requirements =
["rocm[libraries]==V"]` from the family's simple index, with the wheels downloaded into a
find-links folder of its own. Every download is kept by content hash (`downloads`): a nightly
deleted from the index stays testable, and stays listed. The IREE side is pinned only when the
user says (`--iree-runtime`: `requirements = ["iree-base-runtime==V", "numpy"]`); without it a
stack is its ROCm side alone (enough for `--engine exec`, whose command brings its own IREE).
"""

from __future__ import annotations

import enum
import json
import os
import platform
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from stress.errors import UsageError
from stress.fs import atomic_write
from stress.runtimes import listing
from stress.runtimes.downloads import Downloads, Record
from stress.runtimes.listing import Build, BuildKind, Entry

ROCM_PROJECT: str = "rocm"
WHEEL_PROJECTS: tuple[str, ...] = ("rocm", "rocm-sdk-core", "rocm-sdk-libraries-{family}")
#   what `pip install rocm[libraries]==V` takes from a family's index (TheRock's wheels)
LINKS_DIR: str = "links"  # downloads/links/<family>/<version>/: one find-links folder a build


class PackageKind(enum.Enum):
    TARBALL = "tarball"
    WHEEL = "wheel"


@dataclass(frozen=True)
class StacksRequest:
    """What `iree-stress stacks` was asked for."""

    index: str
    start: str
    end: str
    output: Path
    cache_dir: Path
    family: str | None = None
    kind: PackageKind = PackageKind.TARBALL
    iree_runtime: str = ""
    include: tuple[BuildKind, ...] = ()
    download: bool = True
    command: tuple[str, ...] = ()  # the command line, for the file's first comment
    compiler: str = ""  # iree-base-compiler of every stack's artifacts ('' = the tool's)


@dataclass
class Written:
    """The stacks file written: its builds in order, and what was left out."""

    path: Path
    builds: list[Build]
    skipped: str = ""
    kept_only: list[str] = field(default_factory=list)  # versions no longer on the index

    def describe(self) -> str:
        first, last = self.builds[0].version, self.builds[-1].version
        gone = (f"; {len(self.kept_only)} no longer on the index, from the download cache "
                f"({', '.join(self.kept_only[:3])})" if self.kept_only else "")
        return (f"{len(self.builds)} stacks {first} .. {last} by build date -> {self.path}"
                f"{'; ' + self.skipped if self.skipped else ''}{gone}")


def _from_records(records: Sequence[Record], kind: PackageKind, family: str) -> list[Build]:
    """Builds the index listed once and no longer does, whose downloads are kept."""
    entries = [Entry(r.url, r.name, size=r.size) for r in records]
    if kind is PackageKind.TARBALL:
        return listing.tarballs(entries)
    return listing.wheel_builds(entries, family)


def _project_url(index: str, project: str) -> str:
    return urllib.parse.urljoin(index if index.endswith("/") else index + "/",
                                listing.canonical(project) + "/")


def _wheel_family(req: StacksRequest) -> str:
    if req.family:
        return req.family
    return urllib.parse.urlsplit(req.index).path.rstrip("/").rsplit("/", 1)[-1]


def _machine_ok(name: str) -> bool:
    """A wheel this machine can install (its platform tag), or an sdist."""
    if name.endswith(".tar.gz"):
        return True
    tags = name[:-4].split("-")[-1]
    return tags == "any" or tags.endswith(platform.machine()) and "linux" in tags


def list_builds(req: StacksRequest, downloads: Downloads) -> tuple[list[Build], set[str]]:
    """Every build of the asked family and kind on the index, plus those it no longer lists
    whose downloads are kept (their versions: the second item)."""
    if req.kind is PackageKind.TARBALL:
        found = listing.tarballs(listing.read_listing(req.index))
        builds = listing.with_family(found, req.family, req.index) if found else []
        family = req.family or (builds[0].family if builds else None)
    else:
        family = _wheel_family(req)
        page = _project_url(req.index, ROCM_PROJECT)
        builds = listing.wheel_builds(listing.read_listing(page), family)
    listed = {b.version for b in builds}
    kept = [b for b in _from_records(downloads.recorded(req.index), req.kind, family or "")
            if b.version not in listed and (not family or b.family.lower() == family.lower()
                                            or req.kind is PackageKind.WHEEL)]
    gone = {b.version: b for b in kept}
    builds += list(gone.values())
    if not builds:
        raise UsageError(f"no TheRock {req.kind.value} on the index {req.index}")
    return builds, set(gone)


def _wheel_files(req: StacksRequest, family: str) -> dict[str, dict[str, list[Entry]]]:
    """Project -> version -> files, for each project `rocm[libraries]` installs."""
    out = {}
    for project in WHEEL_PROJECTS:
        name = project.format(family=family)
        out[name] = listing.package_files(listing.read_listing(_project_url(req.index, name)),
                                          name)
    return out


def _download(req: StacksRequest, builds: Sequence[Build], downloads: Downloads,
              say: Callable[[str], None]) -> dict[str, list[Record]]:
    """Version -> its kept downloads (tarball: one; wheels: one a project)."""
    got: dict[str, list[Record]] = {}
    if req.kind is PackageKind.TARBALL:
        for b in builds:
            say(f"{b.version}: {b.filename}")
            got[b.version] = [downloads.get(b.url, b.filename, b.size, req.index, b.version,
                                            b.family, say)]
        return got
    family = _wheel_family(req)
    files = _wheel_files(req, family)
    kept = {(r.version, r.name): r for r in downloads.recorded(req.index)}
    for b in builds:
        got[b.version] = []
        for project, versions in files.items():
            entries = [e for e in versions.get(b.version, []) if _machine_ok(e.name)]
            if entries:
                e = entries[0]
                say(f"{b.version}: {e.name}")
                got[b.version].append(downloads.get(e.url, e.name, e.size, req.index,
                                                    b.version, family, say))
            else:
                old = [r for (v, _n), r in kept.items() if v == b.version and
                       listing.canonical(r.name.split("-", 1)[0]) == listing.canonical(project)]
                if not old:
                    raise UsageError(f"{b.version}: no {project} wheel for this machine on "
                                     f"the index {req.index}")
                got[b.version].append(old[0])
    return got


def _links_folder(downloads: Downloads, family: str, version: str,
                  records: Sequence[Record]) -> Path:
    """A find-links folder holding (links to) one build's wheels, and nothing else."""
    folder = downloads.root / LINKS_DIR / family / version
    folder.mkdir(parents=True, exist_ok=True)
    for r in records:
        link = folder / r.name
        target = downloads.blob(r.sha256, r.name)
        if link.is_symlink() and os.readlink(link) != str(target):
            link.unlink()
        if not link.exists():
            link.symlink_to(target)
    return folder


def _q(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(text)


def render(req: StacksRequest, builds: Sequence[Build], got: dict[str, list[Record]],
           downloads: Downloads, skipped: str) -> str:
    family = builds[0].family or _wheel_family(req)
    lines = [f"# written by: {' '.join(req.command) or 'iree-stress stacks'}",
             f"# {len(builds)} TheRock {req.kind.value} builds of {family} from {req.index},"
             f" by build date" + (f"; {skipped}" if skipped else ""),
             "# downloads are kept by content (sha256) under " + str(downloads.root), ""]
    iree = [f"iree-base-runtime=={req.iree_runtime}", "numpy"] if req.iree_runtime else []
    for b in builds:
        recs = got.get(b.version, [])
        lines.append(f"[stacks.{_q(b.version)}]  # {b.kind.describe()}, built "
                     f"{b.date[:4]}-{b.date[4:6]}-{b.date[6:]}")
        if iree:
            lines.append(f"requirements = [{', '.join(_q(r) for r in iree)}]")
        if req.compiler:
            lines.append(f"compiler = {_q(req.compiler)}")
        if req.kind is PackageKind.TARBALL:
            r = recs[0]
            lines.append(f"rocm = {_q(str(downloads.blob(r.sha256, r.name)))}")
            lines.append(f"# from {r.url} (sha256 {r.sha256})")
        else:
            lines.append(f"rocm_requirements = [{_q(f'rocm[libraries]=={b.version}')}]")
            lines.append(f"rocm_index_url = {_q(req.index)}")
            if recs:
                folder = _links_folder(downloads, family, b.version, recs)
                lines.append(f"find_links = [{_q(str(folder))}]")
                lines += [f"# {r.name} sha256 {r.sha256}" for r in recs]
        lines.append("")
    return "\n".join(lines)


def write_stacks(req: StacksRequest, say: Callable[[str], None]) -> Written:
    """Lists the index, picks the builds from `start` to `end` by build date, downloads them
    (kept), and writes the stacks file atomically."""
    if req.compiler and not req.iree_runtime:
        raise UsageError("--compiler needs --iree-runtime (a stack with its own compiler "
                         "pins its runtime)")
    if req.kind is PackageKind.TARBALL and not req.download:
        raise UsageError("--no-download is for wheels: a tarball stack names its file")
    downloads = Downloads(req.cache_dir)
    builds, gone = list_builds(req, downloads)
    chosen = listing.choose(builds, req.start, req.end, req.include)
    got = _download(req, chosen.builds, downloads, say) if req.download else {}
    text = render(req, chosen.builds, got, downloads, chosen.describe_skipped())
    try:
        atomic_write(req.output, text.encode())
    except OSError as exc:
        raise UsageError(f"cannot write {req.output}: {exc.strerror or exc}") from None
    kept_only = [b.version for b in chosen.builds if b.version in gone]
    return Written(req.output, chosen.builds, chosen.describe_skipped(), kept_only)
