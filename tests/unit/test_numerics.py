"""`--numerics reference|repeat|off` (issue 37): how each program's results are checked, said
in the header; on a device that runs no kernels (the stand-in HIP library) the programs with
dispatches go unchecked and the transfer-only ones stay checked end to end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from stress.analysis import header
from stress.engine.config import SoakConfig
from stress.engine.invocation import Expectation
from stress.programs import corpus, targets
from stress.programs.program import make_inputs
from stress.soak.plan import unchecked_programs
from stress.vocab import NO_KERNELS_MARK, Numerics

STAND_IN = f"iree-stress stand-in HIP device ({NO_KERNELS_MARK})"
ABS = corpus.by_name()["unary.abs.f32.64x64"]
SLICE = corpus.by_name()["transfer.slice.f32.64x64"]
PAD = corpus.by_name()["transfer.pad.f32.64x64"]


def _config(numerics: str, unchecked: list[str], why: str = "") -> SoakConfig:
    return SoakConfig(target=targets.parse("rocm"), driver="hip", device_uri="hip",
                      programs=[ABS, SLICE, PAD], artifacts={}, patterns=["shared"],
                      workers=1, threads=1, seed=1, numerics=numerics, unchecked=unchecked,
                      unchecked_why=why)


def _numerics_line(cfg: SoakConfig) -> str:
    manifest: dict[str, Any] = {"config": cfg.as_dict()}
    return dict(header.rows([manifest]))["numerics"]


def test_the_corpus_has_transfer_only_programs_with_a_reference() -> None:
    transfers = [p for p in corpus.corpus() if p.kind == corpus.TRANSFER]
    assert {p.op for p in transfers} == {"slice", "concat", "pad"}
    assert all(p.has_reference and "linalg.generic" not in p.mlir for p in transfers)


def test_on_a_device_that_runs_no_kernels_only_transfer_programs_stay_checked() -> None:
    off, why = unchecked_programs([ABS, SLICE, PAD], "reference", ["x", STAND_IN])
    assert off == [ABS.name]
    assert why.startswith(f"the device runs no kernels ({STAND_IN})")


def test_a_real_gpu_keeps_every_program_checked() -> None:
    assert unchecked_programs([ABS, SLICE], "reference", ["AMD Instinct MI300X"]) == ([], "")


def test_numerics_off_leaves_every_program_unchecked() -> None:
    assert unchecked_programs([ABS, SLICE], "off", []) == ([ABS.name, SLICE.name], "")


def test_an_unchecked_program_passes_a_wrong_result() -> None:
    inputs = make_inputs(ABS, 3)
    wrong = [np.full((64, 64), 123.0, dtype=np.float32)]
    assert Expectation(ABS, 3, inputs).check(wrong)[0] is False
    assert Expectation(ABS, 3, inputs, Numerics.OFF).check(wrong) == (True, True, "", None)


def test_repeat_checks_each_result_against_the_first_not_the_reference() -> None:
    inputs = make_inputs(ABS, 3)
    first = [np.full((64, 64), 123.0, dtype=np.float32)]
    expect = Expectation(ABS, 3, inputs, Numerics.REPEAT)
    assert expect.check(first)[0] is True  # no reference: the first result is the golden
    ok, _, message, _ = expect.check([first[0] + 1])
    assert not ok
    assert message.splitlines()[0] == "output 0 differs from the first result of this job"


def test_the_header_says_which_programs_went_unchecked_and_why() -> None:
    cfg = _config("reference", [ABS.name], f"the device runs no kernels ({STAND_IN})")
    assert cfg.numerics_of(ABS) is Numerics.OFF and cfg.numerics_of(SLICE) is Numerics.REFERENCE
    assert _numerics_line(cfg) == (
        f"results not checked for 1 of 3 (the device runs no kernels ({STAND_IN})); numpy "
        f"reference for {SLICE.name}, {PAD.name}")


def test_the_header_says_numerics_off_and_repeat_as_asked() -> None:
    assert _numerics_line(_config("off", [ABS.name, SLICE.name, PAD.name])) == \
        "results not checked (--numerics off)"
    assert _numerics_line(_config("repeat", [])) == \
        "each result against the first (--numerics repeat)"


def test_workers_get_each_programs_numerics(tmp_path: Path) -> None:
    import json

    from stress.engine.runfiles import RunFiles

    cfg = _config("reference", [ABS.name])
    cfg.artifacts = {p.name: tmp_path / f"{p.name}.vmfb" for p in cfg.programs}
    files = RunFiles(cfg, tmp_path)
    files.write_worker_configs()
    got = json.loads(files.config_for(0).read_text())["programs"]
    assert {n: p["numerics"] for n, p in got.items()} == \
        {ABS.name: "off", SLICE.name: "reference", PAD.name: "reference"}


def test_the_native_engine_checks_nothing_for_an_unchecked_program(tmp_path: Path) -> None:
    from stress.engine import native

    data = native.prepare(ABS, tmp_path / "off", numerics=Numerics.OFF)
    wrong = np.full((64, 64), 123.0, dtype=np.float32)
    assert native.check(data, wrong) is None
    checked = native.prepare(ABS, tmp_path / "ref")
    assert "differs from the numpy reference" in (native.check(checked, wrong) or "")
