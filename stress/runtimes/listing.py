"""What an index of TheRock builds holds, read the way they have been published: an S3
ListBucket XML listing (paged), an HTML page of links (a PEP 503 simple index or a find-links
page is one), JSON embedded in a page, or a local folder; `file://` and `http(s)://`, standard
library only. Each file name becomes a `Build` (family, version, kind, build date), and builds
are ordered by build DATE, never by version: the `X.Y` prefix moves at branch cuts (7.11 ->
10.0 in 2026), `+bkc.YYYYMMDD` builds are a nightly's sources qualified later, and dev builds
(`X.Y.Z.dev0+<sha>`) carry no date in their version at all.

    7.11.0a20251201              nightly   built 2025-12-01
    7.11.0a20251201+bkc.20251204 bkc       a nightly of 2025-12-01: right after it
    10.0.0a20260105              nightly   built 2026-01-05 (after every 7.x nightly)
    7.12.0.dev0+0a1b2c3d         dev       the listing's date, if it gives one
"""

from __future__ import annotations

import enum
import html.parser
import re
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from stress.errors import UsageError

FETCH_TIMEOUT_S: float = 60.0  # one listing page; an index host that does not answer in a
#   minute is down (a page of a few thousand keys comes in well under a second)
MAX_PAGES: int = 200  # an S3 listing of 1,000 keys a page: 200,000 files is far past any
#   bucket of nightlies (a listing that never ends is a loop, not an index)
TARBALL = re.compile(r"therock-dist-linux-(?P<family>[A-Za-z0-9_-]+?)-"
                     r"(?P<version>\d+\.\d+\.\d+[A-Za-z0-9.+]*?)\.tar\.gz")
_VERSION = re.compile(r"(?P<base>\d+\.\d+\.\d+)(?:a(?P<date>\d{8}))?(?:rc(?P<rc>\d+))?"
                      r"(?P<dev>\.dev\d+)?(?:\+(?P<local>[A-Za-z0-9.]+))?")
_BKC = re.compile(r"bkc\.(\d{8})")
_WHEEL = re.compile(r"(?P<name>[A-Za-z0-9_.]+?)-(?P<version>\d[A-Za-z0-9.+!]*?)"
                    r"(?:-(?P<tags>[A-Za-z0-9_.]+(?:-[A-Za-z0-9_.]+)*)\.whl|\.tar\.gz)")
#   (a wheel's tags are letters, digits, '_' and '.' between dashes: never a quote, '#' or
#   space, so a name found in a page's text does not run on into the next one)


class BuildKind(enum.Enum):
    """What a version says the build is; nightlies are what a bisection walks."""

    NIGHTLY = "nightly"  # X.Y.ZaYYYYMMDD
    BKC = "bkc"  # X.Y.ZaYYYYMMDD+bkc.YYYYMMDD: a nightly's sources, qualified later
    DEV = "dev"  # X.Y.Z.dev0+<sha>: one commit's build
    PRERELEASE = "rc"  # X.Y.ZrcN
    RELEASE = "release"  # X.Y.Z

    def describe(self) -> str:
        return {BuildKind.NIGHTLY: "nightly", BuildKind.BKC: "+bkc build",
                BuildKind.DEV: "dev build", BuildKind.PRERELEASE: "prerelease",
                BuildKind.RELEASE: "release"}[self]


_TIE: dict[BuildKind, int] = {BuildKind.RELEASE: 0, BuildKind.PRERELEASE: 1,
                              BuildKind.NIGHTLY: 2, BuildKind.BKC: 3, BuildKind.DEV: 4}
#   builds of one date: a nightly before the +bkc build of its sources


def version_kind(version: str) -> tuple[BuildKind, str]:
    """The kind of a TheRock version and its build date (YYYYMMDD, '' when it has none)."""
    m = _VERSION.fullmatch(version)
    if not m:
        return BuildKind.DEV, ""
    if m["dev"]:
        return BuildKind.DEV, m["date"] or ""
    if m["local"] and _BKC.search(m["local"]):
        bkc = _BKC.search(m["local"])
        return BuildKind.BKC, m["date"] or (bkc.group(1) if bkc else "")
    if m["date"]:
        return BuildKind.NIGHTLY, m["date"]
    if m["rc"]:  # (IREE's rcs are dated: 3.10.0rc20251201; TheRock's are counted: rc2)
        return BuildKind.PRERELEASE, m["rc"] if len(m["rc"]) == 8 else ""
    return BuildKind.RELEASE, ""


@dataclass(frozen=True)
class Build:
    """One build on the index: a tarball, or (wheels) the `rocm` package of one version."""

    version: str
    kind: BuildKind
    date: str  # YYYYMMDD: the version's own date, else the listing's, else ''
    family: str = ""
    url: str = ""
    filename: str = ""
    size: int = -1  # bytes, when the listing says (-1: unknown)

    def sort_key(self) -> tuple[str, tuple[int, ...], int, str]:
        """Date first; then (one date, or none) the version's numbers, then the kind: a
        nightly before the +bkc build of its sources."""
        base = _VERSION.match(self.version)
        numbers = tuple(int(x) for x in base["base"].split(".")) if base else ()
        return self.date, numbers, _TIE[self.kind], self.version


def by_date(builds: Iterable[Build]) -> list[Build]:
    """Builds in build-date order (undated ones cannot be placed: callers leave them out)."""
    return sorted(builds, key=Build.sort_key)


# --- reading a listing ---------------------------------------------------------------------

@dataclass(frozen=True)
class Entry:
    """One file a listing names: where it is, and what the listing says of it."""

    url: str
    name: str
    modified: str = ""  # YYYYMMDD from the listing (S3's LastModified), '' when not given
    size: int = -1


def fetch(url: str) -> bytes:
    """The bytes at `url` (file:// or http(s)://). A failure is one line (exit 2)."""
    try:
        with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as r:  # noqa: S310  # the user's index
            data: bytes = r.read()
            return data
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise UsageError(f"cannot read the index {url}: {reason}") from None


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[tuple[str, str]] = []  # (href, text)
        self._open: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._open = dict(attrs).get("href") or ""
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._open is not None:
            self.hrefs.append((self._open, "".join(self._text).strip()))
            self._open = None


def _strip_ns(root: ET.Element) -> None:
    for el in root.iter():
        if isinstance(el.tag, str) and "}" in el.tag:
            el.tag = el.tag.split("}", 1)[1]


def parse_s3(data: bytes, url: str) -> tuple[list[Entry], str]:
    """One ListBucket page: its files and the URL of the next page ('' when it is the last).
    Objects live at the bucket URL (the listing's, less its query) plus the key."""
    try:
        root = ET.fromstring(data)  # noqa: S314  # a listing, no entities expanded by ET
    except ET.ParseError as exc:
        raise UsageError(f"cannot read the index {url}: not XML ({exc})") from None
    _strip_ns(root)
    parts = urllib.parse.urlsplit(url)
    path = parts.path
    if not path.endswith("/"):  # a saved listing (listing.xml) lists the files beside it;
        #   a bucket's URL without its slash lists the files under it
        path = path.rsplit("/", 1)[0] + "/" if "." in path.rsplit("/", 1)[-1] else path + "/"
    base = urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))
    entries, last = [], ""
    for c in root.findall("Contents"):
        key = c.findtext("Key") or ""
        if not key or key.endswith("/"):
            continue
        last = key
        modified = re.sub(r"\D", "", (c.findtext("LastModified") or "")[:10])
        size = int(c.findtext("Size") or -1)
        entries.append(Entry(base + urllib.parse.quote(key), key.rsplit("/", 1)[-1],
                             modified, size))
    if (root.findtext("IsTruncated") or "").strip().lower() != "true":
        return entries, ""
    query = dict(urllib.parse.parse_qsl(parts.query))
    token = root.findtext("NextContinuationToken")
    if token:
        query.update({"list-type": "2", "continuation-token": token})
    else:
        query["marker"] = root.findtext("NextMarker") or last
    return entries, urllib.parse.urlunsplit(
        (parts.scheme, parts.netloc, parts.path, urllib.parse.urlencode(query), ""))


def parse_page(data: bytes, url: str) -> list[Entry]:
    """An HTML page: every link (a PEP 503 page's `#sha256=` fragments dropped), and every
    tarball or wheel name written in its text (JSON embedded in a page), relative to it."""
    text = data.decode("utf-8", "replace")
    p = _Links()
    p.feed(text)
    seen: dict[str, Entry] = {}
    for href, _label in p.hrefs:
        full = urllib.parse.urljoin(url, href.split("#", 1)[0])
        name = urllib.parse.unquote(full.rstrip("/").rsplit("/", 1)[-1])
        seen.setdefault(full, Entry(full, name))
    names = {e.name for e in seen.values()}
    plain = urllib.parse.unquote(text)
    for pattern in (TARBALL, _WHEEL):  # (a full URL before the name is where it is)
        for m in re.finditer(r"(?:(?P<at>https?://[^\s\"'<>]*/)|(?<![A-Za-z0-9_.%/-]))"
                             + pattern.pattern, plain):
            name = m.group(0)[len(m["at"] or ""):]
            if name not in names:
                names.add(name)
                full = urllib.parse.urljoin(m["at"] or url, urllib.parse.quote(name))
                seen.setdefault(full, Entry(full, name))
    return list(seen.values())


def read_listing(url: str, get: Callable[[str], bytes] = fetch) -> list[Entry]:
    """Every file the index at `url` lists, whatever its form; a local folder (a path or a
    file:// URL of a folder) lists its files."""
    local = _local_folder(url)
    if local is not None:
        return [Entry(p.resolve().as_uri(), p.name, size=p.stat().st_size)
                for p in sorted(local.iterdir()) if p.is_file()]
    entries: list[Entry] = []
    page, pages = (url if "://" in url else Path(url).resolve().as_uri()), 0
    while page:
        data = get(page)
        pages += 1
        if b"<ListBucketResult" in data[:4096]:  # (an XHTML page of links starts
            #   with `<?xml` too: it is a page, not an empty S3 listing)
            found, page = parse_s3(data, page)
        else:
            found, page = parse_page(data, page), ""
        entries += found
        if pages >= MAX_PAGES:
            raise UsageError(f"the index {url} lists more than {MAX_PAGES} pages: is it a "
                             "loop?")
    return entries


def _local_folder(url: str) -> Path | None:
    if url.startswith("file://"):
        path = Path(urllib.parse.unquote(urllib.parse.urlsplit(url).path))
    elif "://" not in url:
        path = Path(url).expanduser()
    else:
        return None
    return path if path.is_dir() else None


# --- the builds ------------------------------------------------------------------------------

def tarballs(entries: Iterable[Entry]) -> list[Build]:
    """TheRock tarballs (`therock-dist-linux-<family>-<version>.tar.gz`) among the entries;
    an undated version takes the listing's date."""
    out = []
    for e in entries:
        m = TARBALL.fullmatch(e.name)
        if m:
            kind, date = version_kind(m["version"])
            out.append(Build(m["version"], kind, date or e.modified, m["family"], e.url,
                             e.name, e.size))
    return out


def canonical(name: str) -> str:
    """PEP 503's normalized project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def package_files(entries: Iterable[Entry], project: str) -> dict[str, list[Entry]]:
    """Version -> the files of one project on a simple-index page (wheels and sdists)."""
    out: dict[str, list[Entry]] = {}
    for e in entries:
        m = _WHEEL.fullmatch(e.name)
        if m and canonical(m["name"]) == canonical(project):
            out.setdefault(m["version"], []).append(e)
    return out


def wheel_builds(entries: Iterable[Entry], family: str) -> list[Build]:
    """The versions of the `rocm` package on a family's simple index page."""
    out = []
    for version, files in package_files(entries, "rocm").items():
        kind, date = version_kind(version)
        out.append(Build(version, kind, date or max(f.modified for f in files), family,
                         files[0].url, files[0].name, files[0].size))
    return out


def families(builds: Iterable[Build]) -> list[str]:
    return sorted({b.family for b in builds if b.family})


@dataclass(frozen=True)
class Choice:
    """The builds between two versions, in build-date order, and those left out on the way."""

    builds: list[Build]
    skipped: dict[BuildKind, int]
    undated: list[str]

    def describe_skipped(self) -> str:
        parts = [f"{n} {k.describe()}{'s' if n > 1 else ''}" for k, n in self.skipped.items()]
        hints = [f"--include-{k.value}" for k in self.skipped if k in INCLUDABLE]
        if self.undated:
            parts.append(f"{len(self.undated)} without a build date ({self.undated[0]}...)")
        return (f"left out: {', '.join(parts)}" + (f" ({', '.join(hints)} to keep them)"
                                                   if hints else "")) if parts else ""


INCLUDABLE: tuple[BuildKind, ...] = (BuildKind.BKC, BuildKind.DEV)


def choose(builds: Sequence[Build], start: str, end: str,
           include: Iterable[BuildKind] = ()) -> Choice:
    """The builds from version `start` to `end` (both listed; inclusive) by build date,
    +bkc and dev builds only when `include` names their kind (or they are an end)."""
    keep = {BuildKind.NIGHTLY, BuildKind.RELEASE, BuildKind.PRERELEASE, *include}
    listed = {b.version: b for b in builds}
    for flag, v in (("--from", start), ("--to", end)):
        if v not in listed:
            dated = by_date(b for b in builds if b.date)
            span = f"{dated[0].version} .. {dated[-1].version}, {len(dated)} builds" \
                if dated else "no build"
            raise UsageError(f"{flag} {v} is not on the index (it lists {span})")
    undated = [b.version for b in builds if not b.date and b.version not in (start, end)]
    ordered = by_date(b for b in builds if b.date or b.version in (start, end))
    names = [b.version for b in ordered]
    if not listed[start].date or not listed[end].date:
        raise UsageError(f"{start if not listed[start].date else end} has no build date (not "
                         f"in its version, not in the listing): it cannot be ordered")
    i, j = names.index(start), names.index(end)
    if i >= j:
        raise UsageError(f"--from {start} must be built before --to {end} (build dates "
                         f"{listed[start].date}, {listed[end].date})")
    chosen: list[Build] = []
    skipped: dict[BuildKind, int] = {}
    for b in ordered[i:j + 1]:
        if b.kind in keep or b.version in (start, end):
            chosen.append(b)
        else:
            skipped[b.kind] = skipped.get(b.kind, 0) + 1
    return Choice(chosen, skipped, undated)


def with_family(builds: Sequence[Build], family: str | None, index: str) -> list[Build]:
    """The builds of one GPU family: the one asked for, else the only one listed."""
    fams = families(builds)
    if family is None:
        if len(fams) > 1:
            raise UsageError(f"the index {index} lists {len(fams)} families ({', '.join(fams)}): "
                             "pick one with --family")
        return list(builds)
    chosen = [b for b in builds if b.family.lower() == family.lower()]
    if not chosen:
        raise UsageError(f"no build of family {family} on the index {index} (it lists "
                         f"{', '.join(fams) or 'none'})")
    return chosen
