"""Targets: compile flags + runtime driver + device URI.

Flag spellings differ across compiler versions (`--iree-hip-target` became `--iree-rocm-target`),
so the flags are built from the compiler's own `--help` (see `CompilerInfo.flags`), never assumed.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from stress.errors import UsageError


class Backend(str, enum.Enum):
    CPU = "cpu"
    ROCM = "rocm"
    CUDA = "cuda"
    VULKAN = "vulkan"

    def describe(self) -> str:
        return _DESCRIPTIONS[self]


_DESCRIPTIONS = {
    Backend.CPU: "llvm-cpu, runs on local-task (the embedded default; works everywhere)",
    Backend.ROCM: "AMD GPUs through the hip driver (default arch gfx942 = MI300X)",
    Backend.CUDA: "NVIDIA GPUs through the cuda driver (default sm_80; PTX runs on newer GPUs)",
    Backend.VULKAN: "SPIR-V through the vulkan driver",
}

DEFAULT_ARCH: dict[Backend, str] = {
    Backend.CPU: "generic",  # never `host`: artifacts are shared across machines via the cache
    Backend.ROCM: "gfx942",
    Backend.CUDA: "sm_80",  # iree-base-compiler 3.13 rejects sm_90; sm_80 PTX JITs on Hopper
    Backend.VULKAN: "",
}

DRIVER: dict[Backend, str] = {
    Backend.CPU: "local-task",
    Backend.ROCM: "hip",
    Backend.CUDA: "cuda",
    Backend.VULKAN: "vulkan",
}


@dataclass(frozen=True)
class Target:
    backend: Backend
    arch: str

    @property
    def name(self) -> str:
        return self.backend.value if not self.arch else f"{self.backend.value}:{self.arch}"

    @property
    def driver(self) -> str:
        return DRIVER[self.backend]

    @property
    def device_uri(self) -> str:
        return self.driver

    def compile_flags(self, option_names: frozenset[str]) -> list[str]:
        """Compiler flags for this target, spelled the way *this* compiler spells them.

        `option_names` is the set of `--iree-*` option names the compiler's --help lists.
        """
        b = self.backend
        if b is Backend.CPU:
            return ["--iree-hal-target-device=local",
                    "--iree-hal-local-target-device-backends=llvm-cpu",
                    f"--iree-llvmcpu-target-cpu={self.arch or 'generic'}"]
        if b is Backend.ROCM:
            for spelling in ("--iree-rocm-target", "--iree-hip-target"):
                if spelling in option_names:
                    return ["--iree-hal-target-device=hip", f"{spelling}={self.arch}"]
            raise UsageError("this iree-compile has neither --iree-rocm-target nor "
                             "--iree-hip-target: it was built without the ROCm backend")
        if b is Backend.CUDA:
            return ["--iree-hal-target-device=cuda", f"--iree-cuda-target={self.arch}"]
        flags = ["--iree-hal-target-device=vulkan"]
        if self.arch:
            flags.append(f"--iree-vulkan-target={self.arch}")
        return flags


def parse(text: str) -> Target:
    """`cpu`, `cpu:host`, `rocm`, `rocm:gfx90a`, `cuda:sm_80`, `vulkan`."""
    name, _, arch = text.strip().partition(":")
    try:
        backend = Backend(name.lower())
    except ValueError:
        known = ", ".join(f"{b.value}[:ARCH]" for b in Backend)
        raise UsageError(f"unknown target {text!r}; known targets: {known}") from None
    return Target(backend, arch or DEFAULT_ARCH[backend])
