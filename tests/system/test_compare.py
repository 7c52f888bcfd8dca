"""compare across real runtime stacks (issue 11): real venvs, real workers."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from stress.fs import default_cache_dir

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["-t", "cpu", "-w", "1", "--threads", "1", "-n", "4", "-p", "unary.exp.f32*",
         "-P", "shared"]


def iree_stress(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stress", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=timeout)


def test_a_stack_that_cannot_start_its_workers_is_inconclusive_with_the_reason(
        tmp_path: Path) -> None:
    f = tmp_path / "stacks.toml"
    f.write_text('[stacks.ok]\n\n[stacks.broken]\nenv = { PYTHONHOME = "/nonexistent" }\n')
    out = iree_stress("compare", "ok", "broken", "--stacks", str(f), *SMALL, "--seed", "1",
                      "--results", str(tmp_path / "out"), "--json")
    assert out.returncode == 3, out.stderr
    r = json.loads(out.stdout)
    assert r["verdict"] == "inconclusive"
    assert r["reason"].startswith("stack broken trial 0: cannot start:")
    assert not any(t["failed"] for t in r["per_trial"])  # not a crash of the stack


def test_an_unresolvable_requirement_is_exit_2_naming_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()
    f = tmp_path / "stacks.toml"
    f.write_text('[stacks.ok]\n\n[stacks.gone]\nrequirements = ["iree-base-runtime==0.0.1"]\n'
                 f'index_url = "file://{tmp_path}/no-index"\nfind_links = ["wheels"]\n')
    out = iree_stress("compare", "ok", "gone", "--stacks", str(f), *SMALL, "--cache-dir",
                      str(tmp_path / "cache"), "--results", str(tmp_path / "out"))
    assert out.returncode == 2
    line = out.stderr.strip().splitlines()[-1]
    assert line.startswith(f"iree-stress: error: {f}:3: stack 'gone': install of requirements")
    assert "iree-base-runtime==0.0.1" in line
    assert not (tmp_path / "out").exists()  # nothing ran


HEADER = ("iree-stress", "runtime", "compiler", "target", "device", "driver", "host", "seed",
          "rerun")


def header_of(text: str) -> dict[str, str]:
    """The `label: value` lines before the first blank line (what was tested, first)."""
    head = text.split("\n\n", 1)[0].splitlines()
    return dict(line.split(": ", 1) for line in head if ": " in line)


def test_compare_and_bisect_say_what_was_tested_first_in_text_and_json(tmp_path: Path) -> None:
    """issue 28 item 4: soak, report and gate outputs begin with the header; compare's and
    bisect's did not (no runtime, compiler, target, device, host nor command line)."""
    f = tmp_path / "stacks.toml"
    f.write_text('[stacks.one]\n\n[stacks.two]\nenv = { IREE_STRESS_NOTE = "2" }\n\n'
                 '[stacks.three]\nenv = { IREE_STRESS_NOTE = "3" }\n')
    for cmd in (["compare", "one", "two", "--trials", "1"],
                ["bisect", "--good", "one", "--bad", "three", "--max-trials", "2"]):
        args = [*cmd, "--stacks", str(f), *SMALL, "--seed", "3", "--results",
                str(tmp_path / cmd[0])]
        text = iree_stress(*args)
        assert text.returncode in (0, 3), text.stderr
        head = header_of(text.stdout)
        # (bisect's budget of 2 trials leaves `three` untried: what one and two reported is
        #   labelled theirs, `runtime (one, two): ...`, and three is on the `not run` line)
        ran = " (one, two)" if "not run" in head else ""
        assert head.get("not run", "three") == "three", text.stdout
        assert tuple(k.removesuffix(ran) for k in head if k.removesuffix(ran) in HEADER) \
            == HEADER, text.stdout
        assert head["target"] == "cpu:generic" and head[f"device{ran}"].startswith("local-task")
        assert head[f"runtime{ran}"].split()[0][0].isdigit()  # a version: the same for each
        assert head["rerun"].startswith(f"iree-stress {cmd[0]} ")
        assert "--stacks" in head["rerun"] and "--results" not in head["rerun"]
        answer = text.stdout.split("\n\n", 1)[1]
        assert answer.startswith("VERDICT" if cmd[0] == "compare" else "BISECT"), text.stdout
        js = iree_stress(*args, "--json")  # (its trials are on disk now: reused)
        assert json.loads(js.stdout)["header"] == {**head, "rerun": head["rerun"] + " --json"}
    # issue 38: each trial's stack.json holds the sha256 of the IREE runtime library its
    #   workers mapped (their /proc/self/maps), and the stack's fingerprint
    facts = json.loads((tmp_path / "compare" / "one" / "trial-0000" / "stack.json").read_text())
    (lib,) = [p for p in facts["library_hashes"] if "/iree/_runtime_libs/" in p]
    assert facts["library_hashes"][lib] == hashlib.sha256(Path(lib).read_bytes()).hexdigest()
    assert facts["fingerprint"]["digest"] and facts["fingerprint"]["roots"] == []


@pytest.mark.slow
def test_runtime_3_12_against_3_13_from_pypi_shows_no_difference_each_with_its_own_runtime(
        tmp_path: Path) -> None:
    """Builds both venvs from the package index into the user cache (once; later runs reuse
    them)."""
    f = tmp_path / "stacks.toml"
    f.write_text('[stacks."iree-3.12"]\nrequirements = ["iree-base-runtime==3.12.0", "numpy"]\n'
                 '\n[stacks."iree-3.13"]\nrequirements = ["iree-base-runtime==3.13.0", "numpy"]\n')
    out_dir = tmp_path / "out"
    out = iree_stress("compare", "iree-3.12", "iree-3.13", "--stacks", str(f), *SMALL,
                      "--trials", "3", "--seed", "5", "--cache-dir", str(default_cache_dir()),
                      "--results", str(out_dir), "--json", timeout=1800)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["verdict"] == "no difference shown"
    for name, version in (("iree-3.12", "3.12.0"), ("iree-3.13", "3.13.0")):
        manifests = sorted((out_dir / name).glob("trial-*/stack.json"))
        assert len(manifests) == 3
        for m in manifests:
            facts = json.loads(m.read_text())
            assert facts["iree_runtime"].startswith(version)
            assert f"iree-base-runtime=={version}" in facts["freeze"]
            assert Path(facts["iree_runtime_path"]).is_relative_to(facts["venv"])
            assert Path(facts["python"]).parent.parent == Path(facts["venv"])
