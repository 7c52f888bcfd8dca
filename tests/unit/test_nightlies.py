"""`iree-stress stacks` (issue 38): a stacks file from an index of TheRock nightlies (S3 XML
listing, HTML page of links, PEP 503 simple index), ordered by build date across the version
prefix jump, +bkc/dev builds left out unless asked, downloads kept by content hash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stress.runtimes import listing, spec
from stress.runtimes.listing import Build, BuildKind
from stress.runtimes.nightlies import PackageKind, StacksRequest, write_stacks
from tests.conftest import run_cli
from tests.helpers.nightly_index import Nightly, serve, write_index

VERSIONS = ["7.11.0a20251124", "7.11.0a20251125", "7.11.0a20251125+bkc.20251128",
            "7.11.0a20251126", "7.11.0a20251127", "7.12.0a20251128", "10.0.0a20251201",
            "10.0.0a20251202", "10.0.0a20251203"]
NIGHTLIES = [v for v in VERSIONS if "bkc" not in v]


def index(tmp_path: Path, versions: list[str] | None = None) -> Path:
    folder = tmp_path / "index"
    order = sorted(versions or VERSIONS)  # listed by name: "10.0..." before "7.11..."
    write_index(folder, [Nightly(v) for v in order])
    return folder


def request(tmp_path: Path, url: str, start: str = VERSIONS[0], end: str = VERSIONS[-1],
            **kw: object) -> StacksRequest:
    return StacksRequest(url, start, end, tmp_path / "stacks.toml", tmp_path / "cache",
                         **kw)  # type: ignore[arg-type]


def test_builds_are_ordered_by_build_date_not_version_with_bkc_after_its_nightly() -> None:
    builds = [Build(v, *listing.version_kind(v)) for v in sorted(VERSIONS)]
    assert [b.version for b in listing.by_date(builds)] == VERSIONS
    assert listing.version_kind("7.12.0.dev0+0a1b2c3d") == (BuildKind.DEV, "")
    assert listing.version_kind("10.1.0a20260811+bkc.20260814") == (BuildKind.BKC, "20260811")


def test_stacks_from_a_paged_s3_listing_over_http_name_every_nightly_in_date_order(
        tmp_path: Path) -> None:
    folder = index(tmp_path)
    with serve(folder) as base:
        r = run_cli("stacks", "--index", f"{base}/bucket/", "--from", VERSIONS[0], "--to",
                    VERSIONS[-1], "-o", str(tmp_path / "stacks.toml"), "--cache-dir",
                    str(tmp_path / "cache"), "-q")
    assert r.rc == 0, r.stderr
    assert "8 stacks 7.11.0a20251124 .. 10.0.0a20251203 by build date" in r.stdout
    assert "left out: 1 +bkc build (--include-bkc to keep them)" in r.stdout
    stacks = spec.load(tmp_path / "stacks.toml")
    assert list(stacks) == NIGHTLIES
    for name, st in stacks.items():
        assert Path(st.rocm).name == f"therock-dist-linux-gfx94X-dcgpu-{name}.tar.gz"
        assert Path(st.rocm).read_bytes() == (folder / "bucket" / Path(st.rocm).name).read_bytes()
        assert not st.requirements  # no --iree-runtime: the ROCm side alone


def test_include_bkc_puts_the_bkc_build_right_after_its_nightly_from_an_html_page(
        tmp_path: Path) -> None:
    with serve(index(tmp_path)) as base:
        written = write_stacks(request(tmp_path, f"{base}/index.html",
                                       include=(BuildKind.BKC,)), lambda _line: None)
    assert [b.version for b in written.builds] == VERSIONS
    assert list(spec.load(written.path)) == VERSIONS  # '+' is allowed in a stack name


def test_iree_runtime_pins_the_iree_side_of_every_stack(tmp_path: Path) -> None:
    with serve(index(tmp_path)) as base:
        written = write_stacks(request(tmp_path, f"{base}/bucket/", iree_runtime="3.10.0",
                                       compiler="3.10.0"), lambda _line: None)
        with pytest.raises(Exception, match="--compiler needs --iree-runtime"):
            write_stacks(request(tmp_path, f"{base}/bucket/", compiler="3.10.0"),
                         lambda _line: None)
    stacks = spec.load(written.path)
    assert {st.runtime_version for st in stacks.values()} == {"3.10.0"}
    assert {st.compiler for st in stacks.values()} == {"3.10.0"}
    assert all("numpy" in st.requirements for st in stacks.values())


def test_a_nightly_deleted_from_the_index_stays_listed_and_testable_from_the_cache(
        tmp_path: Path) -> None:
    folder = index(tmp_path)
    with serve(folder) as base:
        write_stacks(request(tmp_path, f"{base}/bucket/"), lambda _line: None)
        gone = folder / "bucket" / Nightly(NIGHTLIES[3]).filename
        gone.unlink()
        keys = json.loads((folder / "keys.json").read_text())
        (folder / "keys.json").write_text(json.dumps(
            [k for k in keys if k["key"] != gone.name]))
        again = write_stacks(request(tmp_path, f"{base}/bucket/"), lambda _line: None)
    assert [b.version for b in again.builds] == NIGHTLIES
    assert again.kept_only == [NIGHTLIES[3]]
    assert "1 no longer on the index, from the download cache" in again.describe()
    assert Path(spec.load(again.path)[NIGHTLIES[3]].rocm).is_file()


def test_downloads_are_kept_by_content_hash(tmp_path: Path) -> None:
    same = b"one and the same libamdhip64"
    folder = tmp_path / "index"
    write_index(folder, [Nightly(v, library=same) if v in VERSIONS[3:5] else Nightly(v)
                         for v in NIGHTLIES])
    with serve(folder) as base:
        written = write_stacks(request(tmp_path, f"{base}/bucket/"), lambda _line: None)
    stacks = spec.load(written.path)
    paths = [Path(st.rocm) for st in stacks.values()]
    assert all(p.parent.parent.name == "sha256" and len(p.parent.name) == 64 for p in paths)
    assert len({p.parent.name for p in paths}) == len(paths)  # tarballs differ (version)


def test_a_version_not_on_the_index_is_one_line_exit_2(tmp_path: Path) -> None:
    with serve(index(tmp_path)) as base:
        r = run_cli("stacks", "--index", f"{base}/bucket/", "--from", "7.11.0a20251101",
                    "--to", VERSIONS[-1], "-o", str(tmp_path / "s.toml"), "-q",
                    "--cache-dir", str(tmp_path / "cache"))
    assert r.rc == 2
    assert r.stderr.strip() == ("iree-stress: error: --from 7.11.0a20251101 is not on the index "
                                "(it lists 7.11.0a20251124 .. 10.0.0a20251203, 9 builds)")
    assert not (tmp_path / "s.toml").exists()


def test_several_families_on_one_index_need_family(tmp_path: Path) -> None:
    folder = tmp_path / "index"
    write_index(folder, [Nightly(v) for v in NIGHTLIES] +
                [Nightly(v, family="gfx110X-all") for v in NIGHTLIES])
    with serve(folder) as base:
        with pytest.raises(Exception, match="lists 2 families .gfx110X-all, gfx94X-dcgpu.: "
                                            "pick one with --family"):
            write_stacks(request(tmp_path, f"{base}/bucket/"), lambda _line: None)
        written = write_stacks(request(tmp_path, f"{base}/bucket/", family="gfx110X-all"),
                               lambda _line: None)
    assert all("gfx110X-all" in st.rocm for st in spec.load(written.path).values())


def test_dev_builds_are_left_out_or_ordered_by_the_listing_date(tmp_path: Path) -> None:
    folder = tmp_path / "index"
    dev = "7.12.0.dev0+0a1b2c3d"
    write_index(folder, [Nightly(v, modified=f"{v[-8:-4]}-{v[-4:-2]}-{v[-2:]}T03:00:00.000Z")
                         for v in NIGHTLIES] +
                [Nightly(dev, modified="2025-11-29T12:00:00.000Z")])
    with serve(folder) as base:
        left = write_stacks(request(tmp_path, f"{base}/bucket/"), lambda _line: None)
        kept = write_stacks(request(tmp_path, f"{base}/bucket/", include=(BuildKind.DEV,)),
                            lambda _line: None)
    assert dev not in [b.version for b in left.builds]
    assert "1 dev build" in left.skipped
    names = [b.version for b in kept.builds]
    assert names.index("7.12.0a20251128") < names.index(dev) < names.index("10.0.0a20251201")


def test_wheel_stacks_come_from_a_simple_index_with_the_wheels_kept(tmp_path: Path) -> None:
    index_dir = tmp_path / "v2" / "gfx94X-dcgpu"
    projects = {"rocm": "rocm-{v}.tar.gz",
                "rocm-sdk-core": "rocm_sdk_core-{v}-py3-none-linux_x86_64.whl",
                "rocm-sdk-libraries-gfx94x-dcgpu":
                    "rocm_sdk_libraries_gfx94X_dcgpu-{v}-py3-none-linux_x86_64.whl"}
    versions = NIGHTLIES[:4]
    for project, pattern in projects.items():
        (index_dir / project).mkdir(parents=True)
        links = []
        for v in versions:
            name = pattern.format(v=v)
            (index_dir / project / name).write_bytes(f"{project} {v}".encode())
            links.append(f'<a href="{name}#sha256=00">{name}</a>')
        (index_dir / project / "index.html").write_text("\n".join(links))
    with serve(tmp_path) as base:
        url = f"{base}/v2/gfx94X-dcgpu/"
        written = write_stacks(request(tmp_path, url, versions[0], versions[-1],
                                       kind=PackageKind.WHEEL), lambda _line: None)
    stacks = spec.load(written.path)
    assert list(stacks) == versions
    st = stacks[versions[1]]
    assert st.rocm_requirements == (f"rocm[libraries]=={versions[1]}",)
    assert st.rocm_index_url == url and st.isolated and not st.requirements
    (links,) = st.find_links
    assert sorted(p.name for p in Path(links).iterdir()) == sorted(
        p.format(v=versions[1]) for p in projects.values())
    with serve(tmp_path) as base:
        url = f"{base}/v2/gfx94X-dcgpu/"
        bare = write_stacks(request(tmp_path, url, versions[0], versions[-1],
                                    kind=PackageKind.WHEEL, download=False), lambda _line: None)
        with pytest.raises(Exception, match="--no-download is for wheels"):
            write_stacks(request(tmp_path, url, versions[0], versions[-1], download=False),
                         lambda _line: None)
    assert all(not st.find_links for st in spec.load(bare.path).values())


def test_json_embedded_in_a_page_lists_the_tarballs_where_it_says_they_are(
        tmp_path: Path) -> None:
    folder = index(tmp_path, NIGHTLIES)
    with serve(folder) as base:
        files = [{"url": f"{base}/bucket/{Nightly(v).filename}"} for v in NIGHTLIES[:4]] + \
            [{"name": Nightly(v).filename} for v in NIGHTLIES[4:]]  # (relative to the page)
        (folder / "bucket" / "page.html").write_text(
            f"<html><script>window.nightlies = {json.dumps(files)};</script></html>")
        written = write_stacks(request(tmp_path, f"{base}/bucket/page.html"),
                               lambda _line: None)
    assert [b.version for b in written.builds] == NIGHTLIES


def test_a_listed_file_that_cannot_be_downloaded_is_one_line_exit_3_leaving_no_part_file(
        tmp_path: Path) -> None:
    folder = index(tmp_path)
    (folder / "bucket" / Nightly(VERSIONS[3]).filename).unlink()  # listed, not there
    with serve(folder) as base:
        r = run_cli("stacks", "--index", f"{base}/bucket/", "--from", VERSIONS[0], "--to",
                    VERSIONS[-1], "-o", str(tmp_path / "s.toml"), "-q", "--cache-dir",
                    str(tmp_path / "cache"))
    assert r.rc == 3, r.stderr
    assert r.stderr.startswith(f"iree-stress: error: cannot download {base}/bucket/"
                               f"{Nightly(VERSIONS[3]).filename}: ")
    assert len(r.stderr.strip().splitlines()) == 1
    assert not list((tmp_path / "cache" / "downloads").glob(".part-*"))


def test_undated_versions_order_by_their_numbers_and_iree_rcs_by_their_date() -> None:
    names = ["3.13.0", "3.12.0", "3.13.0rc20251016", "3.11.0"]
    builds = [Build(v, *listing.version_kind(v)) for v in names]
    assert listing.version_kind("3.13.0rc20251016") == (BuildKind.PRERELEASE, "20251016")
    assert [b.version for b in listing.by_date(b for b in builds if not b.date)] == \
        ["3.11.0", "3.12.0", "3.13.0"]


def test_clean_cache_all_keeps_the_downloads(tmp_path: Path) -> None:
    from stress import housekeeping as hk

    with serve(index(tmp_path, NIGHTLIES[:3])) as base:
        written = write_stacks(request(tmp_path, f"{base}/bucket/", NIGHTLIES[0],
                                       NIGHTLIES[2]), lambda _line: None)
    kept = [Path(st.rocm) for st in spec.load(written.path).values()]
    list(hk.clean(tmp_path / "results", tmp_path / "cache", None, None, None, True, False))
    assert all(p.is_file() for p in kept)


def test_an_s3_listing_without_continuation_tokens_pages_by_marker_and_a_saved_one_lists_beside_it(
        tmp_path: Path) -> None:
    def page(keys: list[str], more: bool) -> bytes:
        items = "".join(f"<Contents><Key>{k}</Key><Size>1</Size></Contents>" for k in keys)
        return (f"<?xml version='1.0'?><ListBucketResult><IsTruncated>{str(more).lower()}"
                f"</IsTruncated>{items}</ListBucketResult>").encode()

    names = [Nightly(v).filename for v in NIGHTLIES]
    asked: list[str] = []

    def get(url: str) -> bytes:
        asked.append(url)
        return page(names[4:], False) if "marker=" in url else page(names[:4], True)

    entries = listing.read_listing("https://bucket.invalid/?prefix=therock-dist", get)
    assert [e.name for e in entries] == names
    assert asked[1] == f"https://bucket.invalid/?prefix=therock-dist&marker={names[3]}"
    assert entries[0].url == f"https://bucket.invalid/{names[0]}"
    saved = tmp_path / "listing.xml"
    saved.write_bytes(page(names, False))
    (e0, *_rest) = listing.read_listing(saved.as_uri())
    assert e0.url == (tmp_path / names[0]).as_uri()


def test_a_simple_index_page_lists_each_wheel_once_by_its_own_name() -> None:
    wheels = [f"rocm_sdk_core-{v}-py3-none-linux_x86_64.whl" for v in NIGHTLIES[:2]]
    links = "\n".join(f'<a href="{w}#sha256={i}0">{w}</a><br/>' for i, w in enumerate(wheels))
    page = f"<html><body>{links}</body></html>".encode()
    url = "https://index.invalid/v2/gfx94X-dcgpu/rocm-sdk-core/"
    assert [e.name for e in listing.parse_page(page, url)] == wheels
    embedded = f"<script>var files = {json.dumps(wheels)};</script>".encode()
    assert [e.name for e in listing.parse_page(embedded, url)] == wheels
    assert sorted(listing.package_files(listing.parse_page(embedded, url), "rocm-sdk-core")) \
        == NIGHTLIES[:2]


def test_a_relative_cache_dir_still_names_the_downloads_from_a_stacks_file_elsewhere(
        tmp_path: Path) -> None:
    folder = index(tmp_path, NIGHTLIES[:2])
    r = run_cli("stacks", "--index", str(folder / "index.html"), "--from", NIGHTLIES[0], "--to",
                NIGHTLIES[1], "-o", "ci/stacks.toml", "--cache-dir", "cache", "-q",
                cwd=tmp_path)
    assert r.rc == 0, r.stderr
    for st in spec.load(tmp_path / "ci" / "stacks.toml").values():
        assert Path(st.rocm).is_file(), st.rocm


def test_an_xhtml_page_of_links_is_read_as_a_page_not_as_an_s3_listing() -> None:
    name = Nightly(NIGHTLIES[0]).filename
    page = (f'<?xml version="1.0" encoding="UTF-8"?>\n<html xmlns="http://www.w3.org/1999/'
            f'xhtml"><body><a href="{name}">{name}</a></body></html>').encode()
    entries = listing.read_listing("https://index.invalid/nightlies/", lambda _url: page)
    assert [(e.name, e.url) for e in entries] == [
        (name, f"https://index.invalid/nightlies/{name}")]


def test_an_output_or_cache_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    folder = index(tmp_path, NIGHTLIES[:2])
    (tmp_path / "a-file").write_text("")
    args = ("stacks", "--index", str(folder / "index.html"), "--from", NIGHTLIES[0], "--to",
            NIGHTLIES[1], "-q")
    r = run_cli(*args, "-o", str(tmp_path / "a-file" / "stacks.toml"), "--cache-dir",
                str(tmp_path / "cache"))
    assert r.rc == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"iree-stress: error: cannot write "
                               f"{tmp_path / 'a-file' / 'stacks.toml'}: ")
    r = run_cli(*args, "-o", str(tmp_path / "stacks.toml"), "--cache-dir",
                str(tmp_path / "a-file" / "cache"))
    assert r.rc == 3 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"iree-stress: error: cannot keep downloads in "
                               f"{tmp_path / 'a-file' / 'cache' / 'downloads'}: ")
