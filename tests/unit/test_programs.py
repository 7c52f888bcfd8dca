from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from stress.errors import UsageError
from stress.programs import compiler, corpus, dtypes, reference, targets, userprog
from stress.programs.program import Program, Role, make_inputs

NAME = re.compile(r"^(unary|binary|chain|dynamic|transfer)\.[a-z_]+\.(f32|f16|bf16|i32|i8)"
                  r"\.[0-9xN+a-z]+$")
REPO = Path(__file__).resolve().parents[2]


def test_corpus_has_at_least_60_programs_with_unique_greppable_names() -> None:
    names = [p.name for p in corpus.corpus()]
    assert len(names) >= 60
    assert len(set(names)) == len(names)
    assert all(NAME.match(n) for n in names), [n for n in names if not NAME.match(n)]
    assert "binary.add.f16.2x16x64x64+1x16x1x1" in names


def test_corpus_covers_required_ops_dtypes_and_shape_range() -> None:
    progs = corpus.corpus()
    ops = {(p.kind, p.op) for p in progs}
    for op in ("abs", "neg", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "floor",
               "ceil", "sin", "erf", "reciprocal"):
        assert ("unary", op) in ops
    for op in ("add", "sub", "mul", "div", "max", "min", "pow", "select"):
        assert ("binary", op) in ops
    assert {p.dtype for p in progs} >= {"f32", "f16", "bf16", "i32", "i8"}
    assert any(p.args[0].shape == () for p in progs)  # rank-0
    assert max(p.elements for p in progs) >= 8 * 1024 * 1024
    assert sum(p.kind == "chain" for p in progs) >= 3
    assert any(None in p.args[0].shape for p in progs)


def test_rendering_is_stable_so_cache_keys_are_stable() -> None:
    corpus.corpus.cache_clear()
    first = {p.name: p.mlir for p in corpus.corpus()}
    corpus.corpus.cache_clear()
    assert first == {p.name: p.mlir for p in corpus.corpus()}


def test_broadcast_program_maps_size_one_dims_to_zero() -> None:
    p = corpus.by_name()["binary.add.f32.2x16x64x64+1x16x1x1"]
    assert "affine_map<(d0, d1, d2, d3) -> (0, d1, 0, 0)>" in p.mlir


def test_filter_matching_nothing_names_what_exists() -> None:
    with pytest.raises(UsageError, match="no corpus program matches 'nope.*'.*kinds: binary"):
        corpus.select(["nope.*"])


def test_glob_filters_select_by_kind_and_dtype() -> None:
    progs = corpus.select(["binary.*"], dtype="i8")
    assert progs and all(p.kind == "binary" and p.dtype == "i8" for p in progs)


def test_cpu_argv_is_portable_and_rocm_flag_spelling_follows_the_compiler() -> None:
    prog = corpus.by_name()["unary.exp.f32.64x64"]
    cpu = compiler.build_compile_argv("iree-compile", prog, targets.parse("cpu"), frozenset(),
                                      Path("in.mlir"), Path("out.vmfb"))
    assert "--iree-llvmcpu-target-cpu=generic" in cpu
    assert not any("host" in a for a in cpu)
    new = targets.parse("rocm").compile_flags(frozenset({"--iree-rocm-target"}))
    old = targets.parse("rocm:gfx90a").compile_flags(frozenset({"--iree-hip-target"}))
    assert new == ["--iree-hal-target-device=hip", "--iree-rocm-target=gfx942"]
    assert old == ["--iree-hal-target-device=hip", "--iree-hip-target=gfx90a"]
    with pytest.raises(UsageError, match="without the ROCm backend"):
        targets.parse("rocm").compile_flags(frozenset())
    assert targets.parse("cuda").compile_flags(frozenset()) == [
        "--iree-hal-target-device=cuda", "--iree-cuda-target=sm_80"]


def test_cache_argv_drops_paths_but_keeps_flags() -> None:
    prog = corpus.by_name()["unary.exp.f32.64x64"]
    argv = compiler.build_compile_argv("/x/iree-compile", prog, targets.parse("cpu"),
                                       frozenset(), Path("/a/in.mlir"), Path("/b/out.vmfb"),
                                       ("--foo",))
    kept = compiler.cache_argv(argv)
    assert "/a/in.mlir" not in kept and "/b/out.vmfb" not in kept and "--foo" in kept


def test_unknown_target_lists_known_ones() -> None:
    with pytest.raises(UsageError, match="known targets: cpu.*rocm.*cuda.*vulkan"):
        targets.parse("tpu")


def test_inputs_are_reproducible_from_the_seed_and_respect_domains() -> None:
    p = corpus.by_name()["unary.log.f16.64x64"]
    a, b, c = make_inputs(p, 7), make_inputs(p, 7), make_inputs(p, 8)
    assert np.array_equal(a[0], b[0]) and not np.array_equal(a[0], c[0])
    assert (a[0] > 0).all()
    div = corpus.by_name()["binary.div.f32.2x16x64x64+1x16x1x1"]
    assert (np.abs(make_inputs(div, 3)[1]) >= 0.5).all()


def test_dynamic_program_arguments_share_their_runtime_shape() -> None:
    p = corpus.by_name()["dynamic.add.f32.NxN+NxN"]
    shapes = {make_inputs(p, s)[0].shape for s in range(20)}
    assert len(shapes) > 5
    x, y = make_inputs(p, 11)
    assert x.shape == y.shape


def test_bf16_encoding_rounds_to_nearest_even() -> None:
    bf = dtypes.get("bf16")
    vals = np.array([1.0, 1.00390625, -2.5, 3.1415926], dtype=np.float64)
    back = bf.decode(bf.encode(vals))
    assert back[0] == 1.0 and back[1] == 1.0  # halfway rounds to even
    assert abs(back[3] - np.pi) < 0.02


def test_reference_detects_a_wrong_result_and_accepts_a_right_one() -> None:
    x = np.array([0.5, 1.0], dtype=np.float16)
    want = reference.evaluate("exp", "f16", [x])
    assert reference.matches("f16", np.exp(x.astype(np.float32)).astype(np.float16), want)
    assert not reference.matches("f16", np.array([1.0, 2.0], np.float16), want)


def test_program_round_trips_through_json_for_workers() -> None:
    p = corpus.by_name()["binary.add.f16.2x16x64x64+1x16x1x1"]
    assert Program.from_dict(p.to_dict()) == p


def test_plain_user_program_signature_is_parsed() -> None:
    p = userprog.load(str(REPO / "stress/programs/mlir/examples/scale_shift.mlir"))
    assert p.kind == "user" and not p.has_reference and p.input_type == "none"
    assert [a.shape for a in p.args] == [(8, 32), (8, 32)]
    assert p.results[0].dtype == "f32"


def test_fusilli_torch_program_has_an_in_place_output_argument() -> None:
    p = userprog.load(str(REPO / "stress/programs/mlir/examples/fusilli_bias_relu.torch.mlir"))
    assert p.input_type == "torch" and p.results == ()
    assert [a.role for a in p.args] == [Role.OUTPUT, Role.INPUT, Role.INPUT]
    assert p.args[2].shape == (1, 16, 1, 1)
    assert make_inputs(p, 1)[0].sum() == 0  # outputs start zeroed


def test_missing_user_program_file_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="program file not found"):
        userprog.load("/nonexistent/x.mlir")


def test_a_failed_compile_names_every_failed_program_on_one_line_with_the_command_to_see_each(
        ) -> None:
    """issue 28 review: the line named the first failure only and hinted at a bare
    `iree-stress compile --verbose`, which compiles the whole corpus for cpu, not the failure."""
    from stress.programs.cache import CompileReport, rerun_hint
    from stress.programs.compiler import CompileError

    def failed(name: str) -> CompileError:
        return CompileError(name, ["iree-compile", "x.mlir"], 1, "",
                            f"{name}.mlir:1:1: error: nope\n  caret\n")

    hint = rerun_hint("cuda:sm_90", ["binary.*"], ["my dir/a.mlir"])
    assert hint == ("`iree-stress compile --verbose --target cuda:sm_90 --programs 'binary.*' "
                    "--mlir 'my dir/a.mlir'` shows each in full")
    line = CompileReport(errors=[failed("user.a"), failed("user.b"), failed("user.c")]
                         ).failure_line("cuda:sm_90", hint)
    assert line == ("3 program(s) failed to compile for cuda:sm_90: user.a: user.a.mlir:1:1: "
                    f"error: nope; and 2 more: user.b, user.c ({hint})")
    many = CompileReport(errors=[failed(f"corpus.program.{i:03d}") for i in range(60)])
    line = many.failure_line("cpu:generic", hint)
    assert "\n" not in line and len(line) < 500, line
    assert "; and 59 more: corpus.program.001, corpus.program.002, " in line
    assert line.endswith(f" not named) ({hint})"), line
