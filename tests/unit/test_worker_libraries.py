"""Which GPU libraries a worker says it mapped (issue 37): a Vulkan ICD is one its manifest
names, read where the Vulkan loader reads manifests (VK_ICD_FILENAMES and the others first)."""

from __future__ import annotations

import ctypes
import json
from pathlib import Path

import pytest

from stress.engine import worker


def test_the_icd_manifests_the_loader_would_read_name_their_libraries(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    one, two = tmp_path / "one.json", tmp_path / "d"
    one.write_text(json.dumps({"ICD": {"library_path": "/opt/x/libvk_x.so"}}))
    two.mkdir()
    (two / "y.json").write_text(json.dumps({"ICD": {"library_path": "libvk_y.so.1"}}))
    (two / "broken.json").write_text("{")
    monkeypatch.setenv("VK_ICD_FILENAMES", f"{one}:{two}")
    monkeypatch.setattr(worker, "_ICD_DIRS", ())
    assert worker._vulkan_icd_libraries() == {"/opt/x/libvk_x.so", "libvk_y.so.1"}


def test_a_mapped_library_an_icd_manifest_names_is_a_gpu_library(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An ICD named nothing like Vulkan (NVIDIA's is libGLX_nvidia) is found by its name."""
    import shutil

    maps = Path("/proc/self/maps").read_text().split()
    src = next(p for p in maps if p.startswith("/") and Path(p).name.startswith("libm.so"))
    icd = tmp_path / "libicd_standin.so"  # a copy of libm under a name of its own
    shutil.copy(src, icd)
    ctypes.CDLL(str(icd))
    monkeypatch.setattr(worker, "_vulkan_icd_libraries", lambda: set())
    assert str(icd) not in worker._gpu_libraries()
    monkeypatch.setattr(worker, "_vulkan_icd_libraries", lambda: {"/elsewhere/libicd_standin.so"})
    assert str(icd) in worker._gpu_libraries()
