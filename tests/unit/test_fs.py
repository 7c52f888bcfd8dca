"""stress/fs.py: durable files written atomically, and the one default artifact cache folder
that soak, compile and repro all resolve (issue 25: repro once derived it by hand, ignoring
XDG_CACHE_HOME)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stress import fs
from stress.options import _default_cache_dir
from stress.soak.repro import repro_options


def test_the_cache_is_iree_stress_cache_else_xdg_cache_home_else_the_home_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IREE_STRESS_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert fs.default_cache_dir() == tmp_path / "home" / ".cache" / "iree-stress"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert fs.default_cache_dir() == tmp_path / "xdg" / "iree-stress"
    monkeypatch.setenv("IREE_STRESS_CACHE", str(tmp_path / "named"))
    assert fs.default_cache_dir() == tmp_path / "named"


def test_soak_and_repro_resolve_the_same_cache_folder_under_xdg_cache_home(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("IREE_STRESS_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cfg = {"engine": "python", "target": "cpu", "threads": 1, "seed": 1, "timeout_s": 30.0,
           "teardown_timeout_s": 15.0}
    job = {"index": 0, "program": "unary.exp.f32.64x64", "pattern": "shared", "seed": 3,
           "invocations": 4}
    soak_cache = Path(_default_cache_dir())  # what `soak --cache-dir` defaults to
    assert repro_options(tmp_path / "f", 2, cfg, job, "crash", False).cache_dir == soak_cache
    assert soak_cache == tmp_path / "xdg" / "iree-stress"


def test_an_atomic_write_replaces_the_whole_file_and_leaves_no_temp_file(
        tmp_path: Path) -> None:
    target = tmp_path / "deep" / "summary.json"
    fs.atomic_write(target, b"old")
    fs.atomic_write(target, b"new and longer")
    assert target.read_bytes() == b"new and longer"
    assert [p.name for p in target.parent.iterdir()] == ["summary.json"]


def test_a_failed_atomic_write_keeps_the_old_file_and_removes_its_temp_file(
        tmp_path: Path) -> None:
    target = tmp_path / "summary.json"
    fs.atomic_write(target, b"old")
    with pytest.raises(TypeError):
        fs.atomic_write(target, "not bytes")  # type: ignore[arg-type]  # fails mid-write
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]
