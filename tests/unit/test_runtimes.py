"""Runtime stacks (stress.runtimes, issue 11): errors name the file and line before anything
runs; argv built without a shell; the HIP library bound by path; worker facts checked against
the stack."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from stress.errors import UsageError
from stress.runtimes import provision, spec
from stress.runtimes.provision import Built
from stress.runtimes.spec import Stack, StackError


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "stacks.toml"
    p.write_text(text)
    return p


def test_a_stack_file_loads_every_documented_key(tmp_path: Path) -> None:
    (tmp_path / "wheels").mkdir()
    f = write(tmp_path, """
[stacks."iree-3.12"]
requirements = ["iree-base-runtime==3.12.0", "numpy"]

[stacks.therock]
requirements = ["iree-base-runtime==3.10.0rc20251201", "numpy"]
find_links = ["wheels"]
rocm_requirements = ["rocm[libraries]==7.11.0a20251201"]
rocm_index_url = "https://example.invalid/v2/gfx94X-dcgpu/"
compiler = "3.10.0rc20251201"
env = { AMD_LOG_LEVEL = "1" }

[stacks.faulty]
env = { IREE_STRESS_INJECT = "segv@invoke:0.02" }
""")
    got = spec.load(f)
    assert list(got) == ["iree-3.12", "therock", "faulty"]
    rock = got["therock"]
    assert rock.runtime_version == "3.10.0rc20251201"
    assert rock.find_links == (str(tmp_path / "wheels"),)
    assert rock.env == (("AMD_LOG_LEVEL", "1"),)
    assert rock.isolated and not got["faulty"].isolated
    assert rock.line == 5


@pytest.mark.parametrize(("body", "line", "words"), [
    ('[stacks.a]\nrequirements = ["iree-base-runtime==3.12.0"]\nflavour = "x"\n', 3,
     "unknown key 'flavour'"),
    ('[stacks.a]\n\n[stacks.b]\nrequirements = ["iree-base-runtime", "numpy"]\n', 4,
     "has no version"),
    ('[stacks.a]\nrequirements = ["numpy"]\n', 2, "no iree-base-runtime"),
    ('[stacks.a]\nrocm_requirements = ["rocm[libraries]>=7.11"]\n', 2, "has no version"),
    ('[stacks.a]\nenv = { "BAD NAME" = "1" }\n', 2, "is not a variable name"),
    ('[stacks.a]\nfind_links = ["nowhere"]\n', 2, "does not exist"),
    ('[stacks.iree-3.12]\nrequirements = ["iree-base-runtime==3.12.0"]\n', 1, "needs quotes"),
    ('[stacks.a]\nrequirements = "iree-base-runtime==3.12.0"\n', 2, "list of strings"),
    ('[other]\n', 1, "unknown key 'other'"),
])
def test_a_bad_stack_file_is_one_line_with_file_line_and_reason(
        tmp_path: Path, body: str, line: int, words: str) -> None:
    f = write(tmp_path, body)
    with pytest.raises(UsageError) as exc:
        spec.load(f)
    msg = str(exc.value)
    assert msg.startswith(f"{f}:{line}: ")
    assert words in msg
    assert "\n" not in msg


def test_install_uses_index_url_never_extra_index_url_and_no_shell() -> None:
    venv = Path("/cache/stacks/x")
    evil = "rocm[libraries]==7.11.0a20251201; rm -rf /"
    argv = provision.install_argv(venv, [evil], "https://idx.invalid/v2/", ["/w a$(id)"], None)
    assert argv[:3] == ["/cache/stacks/x/bin/python", "-m", "pip"]
    assert "--index-url" in argv and "--extra-index-url" not in argv
    assert argv[-1] == evil  # one argument, never parsed by a shell
    assert argv[argv.index("--find-links") + 1] == "/w a$(id)"
    uv = provision.install_argv(venv, ["numpy"], "", [], "/usr/bin/uv")
    assert uv[:5] == ["/usr/bin/uv", "pip", "install", "--python", "/cache/stacks/x/bin/python"]


def test_a_stack_with_a_rocm_folder_binds_its_hip_library_by_exact_path(tmp_path: Path) -> None:
    lib = tmp_path / "rocm" / "lib"
    lib.mkdir(parents=True)
    (lib / "libamdhip64.so.7").write_bytes(b"")
    f = write(tmp_path, '[stacks.tar]\nrocm = "rocm"\n')
    built = provision.build(spec.load(f)["tar"], tmp_path / "cache")
    assert built.python == sys.executable  # env-only: no venv of its own
    assert built.env["IREE_HIP_DYLIB_PATH"] == f"file:{lib / 'libamdhip64.so.7'}"


def test_a_rocm_tarball_is_unpacked_once_into_the_cache(tmp_path: Path) -> None:
    lib = tmp_path / "tree" / "lib"
    lib.mkdir(parents=True)
    (lib / "libamdhip64.so.7").write_bytes(b"elf")
    tarball = Path(shutil.make_archive(str(tmp_path / "therock-dist"), "gztar",
                                       tmp_path / "tree"))
    f = write(tmp_path, f'[stacks.tar]\nrocm = "{tarball}"\n')
    built = provision.build(spec.load(f)["tar"], tmp_path / "cache")
    path = built.env["IREE_HIP_DYLIB_PATH"].removeprefix("file:")
    assert Path(path).read_bytes() == b"elf"
    assert str(tmp_path / "cache") in path


def test_a_rocm_folder_without_hip_is_a_stack_error(tmp_path: Path) -> None:
    (tmp_path / "rocm" / "lib").mkdir(parents=True)
    f = write(tmp_path, '[stacks.tar]\nrocm = "rocm"\n')
    with pytest.raises(StackError, match="no libamdhip64.so"):
        provision.build(spec.load(f)["tar"], tmp_path / "cache")


def test_a_built_stack_is_held_until_released_and_clean_may_then_remove_it(
        tmp_path: Path) -> None:
    from stress import housekeeping

    f = write(tmp_path, '[stacks.a]\nrequirements = ["iree-base-runtime==3.12.0"]\n')
    stack = spec.load(f)["a"]
    venv = tmp_path / "cache" / "stacks" / f"a-{stack.key()}"
    venv.mkdir(parents=True)
    (venv / ".built.json").write_text('{"stack": "a", "freeze": []}')
    built = provision.build(stack, tmp_path / "cache")
    assert housekeeping.stack_in_use(venv)  # (another open file: flock sees it as another user)
    leases = list(built.leases)  # (still referenced: only release() itself can free the lock,
    built.release()              #   not the garbage collector closing a dropped file)
    assert not housekeeping.stack_in_use(venv)
    assert leases and all(lease.closed for lease in leases)


def built_for(venv: str = "/c/stacks/a", hip: str = "") -> Built:
    st = Stack("a", requirements=("iree-base-runtime==3.12.0",))
    return Built(st, f"{venv}/bin/python", venv=venv, hip_library=hip)


def test_workers_that_ran_the_stack_pass_the_check(tmp_path: Path) -> None:
    venv = tmp_path / "v"
    (venv / "lib" / "iree" / "runtime").mkdir(parents=True)
    facts = {"iree_runtime": "3.12.0rc20260917",
             "iree_runtime_path": str(venv / "lib" / "iree" / "runtime")}
    assert provision.check_facts(built_for(str(venv)), facts) == []


def test_another_runtime_or_another_interpreters_iree_is_an_error(tmp_path: Path) -> None:
    facts = {"iree_runtime": "3.13.0rc20261016",
             "iree_runtime_path": "/usr/lib/python3/site-packages/iree/runtime"}
    problems = provision.check_facts(built_for(str(tmp_path / "v")), facts)
    assert any("3.13.0rc20261016" in p and "3.12.0" in p for p in problems)
    assert any("not from the stack's venv" in p for p in problems)


def test_a_hip_library_other_than_the_bound_one_is_an_error(tmp_path: Path) -> None:
    bound = tmp_path / "libamdhip64.so.7"
    bound.write_bytes(b"")
    venv = tmp_path / "v"
    (venv / "iree").mkdir(parents=True)
    facts = {"iree_runtime": "3.12.0", "iree_runtime_path": str(venv / "iree"),
             "loaded_gpu_libraries": ["/opt/rocm/lib/libamdhip64.so.6"],
             "device_info": "amdhip64_dylib_path: /opt/rocm/lib/libamdhip64.so.6"}
    problems = provision.check_facts(built_for(str(venv), str(bound)), facts)
    assert len(problems) == 2
    assert all("/opt/rocm/lib/libamdhip64.so.6" in p for p in problems)
    ok = {**facts, "loaded_gpu_libraries": [str(bound)],
          "device_info": f"amdhip64_dylib_path: {bound}"}
    assert provision.check_facts(built_for(str(venv), str(bound)), ok) == []


def test_a_build_step_shows_its_step_time_and_pips_current_line_while_it_runs() -> None:
    # issue 28 (item 2): a stack's install (~145 MB of wheels) was minutes of silence
    import io

    from stress.ui import Log

    out = io.StringIO()
    log = Log(True, out)
    script = "print('Collecting numpy'); print('Collecting click'); print('Installing numpy')"
    stack = Stack(name="s", path="stacks.toml", line=1)
    got = provision._run([sys.executable, "-c", script], "install of requirements", stack,
                      status=log, step="step 2/3 install of requirements")
    assert got.splitlines() == ["Collecting numpy", "Collecting click", "Installing numpy"]
    first = out.getvalue().splitlines()[0]
    assert first.startswith("stack s: step 2/3 install of requirements, 0 s")
    assert first.endswith(": Collecting numpy")
    with pytest.raises(StackError, match="exited 3: boom"):
        provision._run([sys.executable, "-c", "import sys; print('boom', file=sys.stderr); "
                     "sys.exit(3)"], "venv", stack)


def test_a_second_hip_library_mapped_while_the_driver_lived_is_an_error(tmp_path: Path) -> None:
    # issue 37: IREE's hip driver dlcloses its library when it is destroyed, so the maps read
    #   after the facts step show no HIP library at all; the ones mapped while it lived do
    bound = tmp_path / "lib" / "libamdhip64.so.7"
    bound.parent.mkdir()
    bound.write_bytes(b"")
    venv = tmp_path / "v"
    (venv / "iree").mkdir(parents=True)
    facts = {"iree_runtime": "3.12.0", "iree_runtime_path": str(venv / "iree"),
             "loaded_gpu_libraries": [], "hip_library": str(bound),
             "hip_library_mapped": [str(bound), "/tmp/preloaded/libamdhip64.so"]}
    problems = provision.check_facts(built_for(str(venv), str(bound)), facts)
    assert problems == [f"workers loaded /tmp/preloaded/libamdhip64.so, the stack binds {bound}"]
    alone = {**facts, "hip_library_mapped": [str(bound)]}
    assert provision.check_facts(built_for(str(venv), str(bound)), alone) == []


def test_a_manifest_names_the_hip_library_the_driver_loaded_with_its_hash(
        tmp_path: Path) -> None:
    import hashlib

    from stress.engine.runfiles import hip_library_identity

    lib = tmp_path / "libamdhip64.so"
    lib.write_bytes(b"stand-in bytes")
    facts = {"device_info": f"\n- amdhip64_dylib_path: {lib}\n- gpu-arch-name: gfx942\n",
             "driver_libraries": [str(lib), "/usr/lib/libvulkan.so.1"]}
    assert hip_library_identity(facts) == {
        "hip_library": str(lib), "hip_library_sha256": hashlib.sha256(b"stand-in bytes")
        .hexdigest(), "hip_library_mapped": [str(lib)]}
    assert hip_library_identity({}) == {"hip_library": None, "hip_library_sha256": None,
                                        "hip_library_mapped": []}
