"""Identical stacks are one stack, and what changed (issue 38): consecutive nightlies with the
same libraries are bisected as one ("A = B: tested once"), the last good stack is the nearest
build to the change, and the answer prints what differs between the last good and the first
bad stack (packages, libraries, component commit ranges from TheRock's manifest)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from stress.cli import cli
from stress.verdicts import changed
from stress.verdicts.identical import groups
from tests.helpers.nightly_index import Nightly, stand_in_trials, write_index

DAYS = [f"7.11.0a202511{d}" for d in (20, 21, 22, 23, 24, 25)] + \
    ["10.0.0a20251201", "10.0.0a20251202"]
FIRST_BAD = 6  # 10.0.0a20251201: across the version-prefix jump
SAME = (4, 5)  # 7.11.0a20251124 = 7.11.0a20251125, right before the first bad one


def pins(i: int) -> dict[str, str]:
    """Component commits of nightly i: rocm-systems moves at the first bad one; the
    identical pair shares every pin."""
    j = SAME[0] if i in SAME else i
    return {"TheRock": hashlib.sha1(f"rock{j}".encode()).hexdigest(),
            "rocm-systems": hashlib.sha1(f"sys{j >= FIRST_BAD}".encode()).hexdigest(),
            "rocm-libraries": hashlib.sha1(b"libs").hexdigest()}


def nightlies() -> list[Nightly]:
    return [Nightly(v, library=f"hip build {SAME[0] if i in SAME else i}".encode(),
                    pins=pins(i), files={"lib/libhsa-runtime64.so.1": b"hsa, never changed"})
            for i, v in enumerate(DAYS)]


@pytest.fixture
def stacks_file(tmp_path: Path) -> Path:
    write_index(tmp_path / "index", nightlies())
    out = tmp_path / "stacks.toml"
    res = CliRunner().invoke(cli, ["stacks", "--index", str(tmp_path / "index" / "bucket"),
                                   "--from", DAYS[0], "--to", DAYS[-1], "-o", str(out), "-q",
                                   "--cache-dir", str(tmp_path / "cache")])
    assert res.exit_code == 0, res.output
    return out


def test_identical_nightlies_are_tested_once_and_what_changed_is_printed(
        stacks_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import stress.verdicts.compare as compare_mod

    trials = stand_in_trials(DAYS, DAYS[FIRST_BAD], 0.5)
    monkeypatch.setattr(compare_mod, "SoakTrials", trials)
    res = CliRunner().invoke(cli, [
        "bisect", "--stacks", str(stacks_file), "--good", DAYS[0], "--bad", DAYS[-1], "-n",
        "3", "-t", "cpu", "--results", str(tmp_path / "bis"), "--cache-dir",
        str(tmp_path / "cache"), "--seed", "3"])
    assert res.exit_code == 0, res.output
    a, b = DAYS[SAME[0]], DAYS[SAME[1]]
    assert f"identical stacks (the same libraries and code objects, 2 files): {a} = {b}: " \
           "tested once" in res.output
    assert f"  identical: {a} = {b}: tested once" in res.output
    assert b not in trials.runs and a in trials.runs
    assert f"first bad stack: {DAYS[FIRST_BAD]} (last good: {b})" in res.output
    text = res.output[res.output.index("WHAT CHANGED"):]
    assert text.splitlines()[0] == f"WHAT CHANGED  {b} (last good) -> {DAYS[FIRST_BAD]} " \
                                   "(first bad)"
    old, new = pins(SAME[1])["rocm-systems"], pins(FIRST_BAD)["rocm-systems"]
    assert f"rocm-systems {old[:8]}..{new[:8]}" in text
    assert f"https://github.com/ROCm/rocm-systems/compare/{old}...{new}" in text
    assert "(1 other components at the same commits)" in text  # rocm-libraries
    hip = [hashlib.sha256(n.library).hexdigest()[:8] for n in nightlies()[SAME[1]:FIRST_BAD + 1]]
    assert f"libraries: 1 differ, 0 new, 0 gone, 1 the same: lib/libamdhip64.so.7 " \
           f"{hip[0]} -> {hip[1]}" in text
    assert f"therock-dist-linux-gfx94X-dcgpu-{DAYS[FIRST_BAD]}.tar.gz (sha256" in text


def test_the_same_build_at_both_ends_is_inconclusive_without_a_trial(
        stacks_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import stress.verdicts.compare as compare_mod

    trials = stand_in_trials(DAYS, DAYS[FIRST_BAD], 0.5)
    monkeypatch.setattr(compare_mod, "SoakTrials", trials)
    res = CliRunner().invoke(cli, [
        "bisect", "--stacks", str(stacks_file), "--good", DAYS[SAME[0]], "--bad",
        DAYS[SAME[1]], "-n", "3", "-t", "cpu", "--results", str(tmp_path / "bis"),
        "--cache-dir", str(tmp_path / "cache")])
    assert res.exit_code == 3, res.output
    assert "are the same build" in res.output and not trials.runs


def test_only_consecutive_stacks_with_one_digest_merge() -> None:
    assert groups(list("abcde"), {"a": "x", "b": "x", "c": "y", "d": "x", "e": ""}) == \
        [["a", "b"], ["c"], ["d"], ["e"]]
    assert groups(["a", "b"], {"a": "", "b": ""}) == [["a"], ["b"]]  # unknown: never merged


def test_component_ranges_read_both_manifest_formats() -> None:
    old = {"the_rock_commit": "a" * 40, "submodules": [
        {"submodule_name": "rocm-systems", "submodule_url":
         "https://github.com/ROCm/rocm-systems.git", "pin_sha": "683a63d9" + "0" * 32}]}
    new = {"TheRock": {"commit": "b" * 40}, "submodules": [
        {"path": "rocm-systems", "url": "https://github.com/ROCm/rocm-systems",
         "commit": "fd61b0f5" + "1" * 32}]}
    lines = changed.component_lines(old, new)
    assert lines[0] == ("components (TheRock manifest): TheRock aaaaaaaa..bbbbbbbb; "
                        "rocm-systems 683a63d9..fd61b0f5")
    assert f"https://github.com/ROCm/rocm-systems/compare/683a63d9{'0' * 32}..." \
           f"fd61b0f5{'1' * 32}" in lines[2]
    assert changed.component_lines(None, new) == [
        "components: no TheRock manifest in the last good stack"]


def test_package_versions_that_differ_are_listed() -> None:
    assert changed.package_lines(["rocm==7.11.0a20251125", "numpy==2.1.0"],
                                 ["rocm==7.11.0a20251126", "numpy==2.1.0", "extra==1"]) == [
        "extra (none) -> 1", "rocm 7.11.0a20251125 -> 7.11.0a20251126"]


def test_each_trial_records_the_stacks_content_hashes(stacks_file: Path,
                                                      tmp_path: Path) -> None:
    from stress.runtimes import provision, spec
    from stress.runtimes.fingerprint import content_facts

    st = spec.load(stacks_file)[DAYS[0]]
    built = provision.build(st, tmp_path / "cache")
    try:
        facts = content_facts(built, {"library_hashes": {"/x/libamdhip64.so": "ab"}})
    finally:
        built.release()
    assert facts["library_hashes"] == {"/x/libamdhip64.so": "ab"}
    fp = facts["fingerprint"]
    tar = Path(st.rocm)
    assert fp["sources"] == {tar.name: hashlib.sha256(tar.read_bytes()).hexdigest()}
    assert fp["libraries"]["lib/libamdhip64.so.7"] == hashlib.sha256(
        nightlies()[0].library).hexdigest()
    json.dumps(facts)  # (it goes into stack.json)


def test_a_wheel_stacks_fingerprint_is_its_rocm_sdk_packages_without_version_stamps(
        tmp_path: Path) -> None:
    from stress.runtimes.fingerprint import of, therock_manifest
    from stress.runtimes.provision import Built
    from stress.runtimes.spec import Stack
    from tests.helpers.nightly_index import MANIFEST, manifest_json

    def venv(version: str, hip: bytes) -> Built:
        site = tmp_path / version / "lib" / "python3.11" / "site-packages"
        core = site / "_rocm_sdk_core"
        (core / "lib").mkdir(parents=True)
        (core / "lib" / "libamdhip64.so.7").write_bytes(hip)
        (core / MANIFEST).parent.mkdir(parents=True)
        (core / MANIFEST).write_bytes(manifest_json(version, pins(0)))  # (its version inside)
        (site / "_rocm_sdk_libraries_gfx94X_dcgpu" / "lib").mkdir(parents=True)
        (site / "_rocm_sdk_libraries_gfx94X_dcgpu" / "lib" / "librocblas.so.5").write_bytes(b"b")
        st = Stack(version, rocm_requirements=(f"rocm[libraries]=={version}",))
        return Built(st, str(tmp_path / version / "bin" / "python"),
                     freeze=[f"rocm=={version}", f"rocm-sdk-core=={version}", "numpy==2.1.0"],
                     venv=str(tmp_path / version))

    a, b, c = (of(venv(v, hip)) for v, hip in (("7.11.0a20251125", b"hip"),
                                                ("7.11.0a20251126", b"hip"),
                                                ("7.11.0a20251127", b"new hip")))
    assert sorted(a.files) == ["_rocm_sdk_core/lib/libamdhip64.so.7",
                               "_rocm_sdk_libraries_gfx94X_dcgpu/lib/librocblas.so.5"]
    assert a.digest == b.digest != c.digest  # versions differ in the freeze and manifest only
    assert a.iree_side == ("numpy==2.1.0",)
    manifest = therock_manifest(a)
    assert manifest is not None and manifest["rocm_package_version"] == "7.11.0a20251125"


def test_stacks_of_one_rocm_tree_whose_artifacts_come_from_two_compilers_are_not_one_stack(
        tmp_path: Path) -> None:
    from stress.runtimes.fingerprint import of
    from stress.runtimes.provision import Built
    from stress.runtimes.spec import Stack

    tree = tmp_path / "rocm"
    (tree / "lib").mkdir(parents=True)
    (tree / "lib" / "libamdhip64.so.7").write_bytes(b"one hip")

    def built(compiler: str) -> Built:
        st = Stack(f"c{compiler}", requirements=("iree-base-runtime==3.13.0", "numpy"),
                   rocm=str(tree), compiler=compiler)
        return Built(st, "python", freeze=["iree-base-runtime==3.13.0"],
                     hip_library=str(tree / "lib" / "libamdhip64.so.7"),
                     compiler=f"/cache/compiler-{compiler}/bin/iree-compile")

    assert of(built("3.11.0")).rocm_side
    assert of(built("3.11.0")).digest == of(built("3.11.0")).digest
    assert of(built("3.11.0")).digest != of(built("3.13.0")).digest  # other modules run


def test_a_library_with_letters_in_its_version_suffix_is_part_of_the_fingerprint(
        tmp_path: Path) -> None:
    from stress.runtimes.fingerprint import tree_hashes

    (tmp_path / "lib" / "llvm" / "lib").mkdir(parents=True)
    (tmp_path / "lib" / "llvm" / "lib" / "libLLVM.so.20.0git").write_bytes(b"llvm")
    (tmp_path / "lib" / "libamdhip64.so.7").write_bytes(b"hip")
    (tmp_path / "lib" / "libamdhip64.so.conf").write_bytes(b"not a library")
    assert sorted(tree_hashes(tmp_path)) == ["lib/libamdhip64.so.7",
                                             "lib/llvm/lib/libLLVM.so.20.0git"]
