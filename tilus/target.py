"""Compilation targets: ``Target`` objects, the predefined GPUs, and the current target."""

from __future__ import annotations

import contextlib
import functools
import sys
from dataclasses import dataclass

from tilus.errors import TilusBackendError, TilusError

KB = 1024


@dataclass(frozen=True)
class TargetProperties:
    """What a target offers.

    Attributes:
        compute_capability: (major, minor); (0, 0) for the generic ``*_any`` targets.
        feature_suffix: "" (forward compatible), "a" (architecture-specific features, this exact
            compute capability only) or "f" (family features, same major version).
        shared_memory_per_block: bytes of shared memory one block may opt in to.
        sm_count: multiprocessors of the GPU the target implies when no GPU is present (the
            data-center part of the generation: A100 108, A10 72, L40S 142, H100/H200 SXM 132,
            B200 148); a GPU present reports its own count (``self.cuda``).
    """

    compute_capability: tuple[int, int]
    feature_suffix: str = ""
    shared_memory_per_block: int = 0
    sm_count: int = 0


@dataclass(frozen=True)
class Target:
    """A compilation target: ``kind`` ("nvgpu", "amdgpu", "gpgpu") and ``arch`` ("sm_90a")."""

    kind: str
    arch: str
    properties: TargetProperties

    @property
    def name(self) -> str:
        """The architecture name, e.g. ``"sm_90a"``."""
        return self.arch

    @property
    def compute_capability(self) -> tuple[int, int]:
        """(major, minor) of the target."""
        return self.properties.compute_capability

    @property
    def feature_suffix(self) -> str:
        """ "" , "a" or "f" (see :class:`TargetProperties`)."""
        return self.properties.feature_suffix

    @property
    def buildable(self) -> bool:
        """True when the CUDA backend can build for this target."""
        return self.arch in BUILDABLE

    def supports(self, other: Target) -> bool:
        """True when code written for ``other`` runs on this target.

        ``other`` without a suffix needs a compute capability at least its own; with ``f`` the
        same major version, a minor at least its own, and this target ``a`` or ``f``; with ``a``
        exactly its compute capability and this target ``a``.
        """
        if other.kind != self.kind and other.kind != "gpgpu":
            return False
        if other.compute_capability == (0, 0):
            return True
        cc, occ = self.compute_capability, other.compute_capability
        if other.feature_suffix == "a":
            return cc == occ and self.feature_suffix == "a"
        if other.feature_suffix == "f":
            return cc[0] == occ[0] and cc[1] >= occ[1] and self.feature_suffix in ("a", "f")
        return cc >= occ

    def __str__(self) -> str:
        return self.arch

    def __repr__(self) -> str:
        return f"Target({self.kind!r}, {self.arch!r})"


def _nv(major: int, minor: int, suffix: str, smem_kb: int, sms: int) -> Target:
    props = TargetProperties((major, minor), suffix, smem_kb * KB, sms)
    return Target("nvgpu", f"sm_{major}{minor}{suffix}", props)


nvgpu_sm70 = _nv(7, 0, "", 96, 80)
nvgpu_sm75 = _nv(7, 5, "", 96, 40)
nvgpu_sm80 = _nv(8, 0, "", 163, 108)
nvgpu_sm86 = _nv(8, 6, "", 99, 72)
nvgpu_sm87 = _nv(8, 7, "", 99, 16)
nvgpu_sm88 = _nv(8, 8, "", 99, 16)
nvgpu_sm89 = _nv(8, 9, "", 99, 142)
nvgpu_sm90 = _nv(9, 0, "", 227, 132)
nvgpu_sm90a = _nv(9, 0, "a", 227, 132)
nvgpu_sm100 = _nv(10, 0, "", 227, 148)
nvgpu_sm100f = _nv(10, 0, "f", 227, 148)
nvgpu_sm100a = _nv(10, 0, "a", 227, 148)
nvgpu_sm103 = _nv(10, 3, "", 227, 148)
nvgpu_sm103f = _nv(10, 3, "f", 227, 148)
nvgpu_sm103a = _nv(10, 3, "a", 227, 148)
nvgpu_sm110 = _nv(11, 0, "", 227, 20)
nvgpu_sm110f = _nv(11, 0, "f", 227, 20)
nvgpu_sm110a = _nv(11, 0, "a", 227, 20)
nvgpu_sm120 = _nv(12, 0, "", 99, 188)
nvgpu_sm120f = _nv(12, 0, "f", 99, 188)
nvgpu_sm120a = _nv(12, 0, "a", 99, 188)
nvgpu_sm121 = _nv(12, 1, "", 99, 48)
nvgpu_sm121f = _nv(12, 1, "f", 99, 48)
nvgpu_sm121a = _nv(12, 1, "a", 99, 48)
nvgpu_any = Target("nvgpu", "nvgpu_any", TargetProperties((0, 0)))
gpgpu_any = Target("gpgpu", "gpgpu_any", TargetProperties((0, 0)))
amdgpu_any = Target("amdgpu", "amdgpu_any", TargetProperties((0, 0)))
amdgpu_gfx1100 = Target("amdgpu", "gfx1100", TargetProperties((11, 0), "", 64 * KB, 48))

#: Every predefined target by name ("sm_90a", "nvgpu_any", ...).
TARGETS: dict[str, Target] = {
    t.arch: t for name, t in dict(globals()).items() if isinstance(t, Target) and "_" in name
}
#: The targets the CUDA backend builds for (NVRTC, the instruction set tilus emits).
BUILDABLE = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")

_current: Target | None = None
_building: Target | None = None  # the target of the build in progress (tilus.compile)


def lookup(target: Target | str) -> Target:
    """The target named ``target`` ("sm_80", "sm80", "nvgpu_sm80"), or ``target`` itself.

    Raises:
        TilusError: an unknown name.
    """
    if isinstance(target, Target):
        return target
    if isinstance(target, str):
        name = target.strip().lower().removeprefix("nvgpu_")
        if name.startswith("sm") and not name.startswith("sm_"):
            name = "sm_" + name[2:]
        hit = TARGETS.get(name) or TARGETS.get(target)
        if hit is not None:
            return hit
    raise TilusError(f"unknown target {target!r}; known targets: {', '.join(TARGETS)}")


def buildable(target: Target | str) -> Target:
    """``lookup(target)``, refused unless the CUDA backend builds for it.

    Raises:
        TilusBackendError: a known target tilus does not build for.
    """
    t = lookup(target)
    if not t.buildable:
        raise TilusBackendError(
            f"target {t.arch} is not supported by the CUDA backend; use one of "
            f"{', '.join(BUILDABLE)}"
        )
    return t


def _gpu_target() -> Target:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        torch = None
    if torch is None or not torch.cuda.is_available():
        raise TilusError("No GPU is available.")
    major, minor = torch.cuda.get_device_capability(torch.cuda.current_device())
    for suffix in ("a", "f", ""):  # the most capable variant of the device's architecture
        hit = TARGETS.get(f"sm_{major}{minor}{suffix}")
        if hit is not None:
            return hit
    raise TilusError(f"the GPU's compute capability {major}.{minor} has no tilus target")


def get_current_target() -> Target:
    """The target set by :func:`set_current_target` / :func:`scope`, else the torch-visible
    GPU's (its ``a`` variant where one exists: sm_90a on an H100/H200).

    Raises:
        TilusError: "No GPU is available." when neither is there.
    """
    return _current if _current is not None else _gpu_target()


def current_or(default: Target | str) -> Target:
    """The target set by :func:`set_current_target` / :func:`scope`, else ``default``."""
    return _current if _current is not None else lookup(default)


def launch_target() -> Target:
    """The target a call on the GPU builds for: the current one, else the GPU's, else sm_90a
    (a fake or absent GPU in tests)."""
    if _current is not None:
        return _current
    try:
        return _gpu_target()
    except TilusError:
        return nvgpu_sm90a


def _set(target: Target | None) -> None:
    global _current
    from tilus import option

    _current = target
    option.epoch[0] += 1  # calls decided for another target decide again


def set_current_target(target: Target | str | None) -> None:
    """Make ``target`` the current target (None: back to the GPU's)."""
    _set(None if target is None else lookup(target))


@contextlib.contextmanager
def scope(target: Target | str):
    """``with tilus.target.scope(t):`` makes ``t`` the current target inside the block."""
    saved = _current
    _set(lookup(target))
    try:
        yield _current
    finally:
        _set(saved)


def transpile_target() -> Target:
    """The target a kernel is transpiled for (what ``self.cuda`` answers for): the target of
    the ``tilus.compile`` in progress, else :func:`launch_target`."""
    return _building if _building is not None else launch_target()


@contextlib.contextmanager
def building_for(target: Target):
    """Transpile for ``target`` inside the block (``tilus.compile``; no epoch change)."""
    global _building
    saved = _building
    _building = target
    try:
        yield target
    finally:
        _building = saved


def gpu_index() -> int | None:
    """The current CUDA device's index, or None when there is no GPU (a process without a
    CUDA driver learns that without importing torch, which takes seconds)."""
    torch = sys.modules.get("torch")
    if torch is None:
        if not _driver_present():
            return None
        try:
            import torch
        except ImportError:  # pragma: no cover - torch is a dependency
            return None
    return torch.cuda.current_device() if torch.cuda.is_available() else None


@functools.cache
def _driver_present() -> bool:
    """Whether the CUDA driver library loads (always assumed off Linux, where it has another
    name)."""
    if not sys.platform.startswith("linux"):
        return True
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def sm_count(target: Target | str | None = None) -> int:
    """Multiprocessors of the GPU that kernels for ``target`` run on, on the host (in a kernel:
    ``self.cuda.sm_count``): the current CUDA device's own count when there is one (of the
    target's compute capability, when a target is given or set), else the count of the GPU
    the target implies (132 for sm_90/sm_90a, an H100/H200 SXM; 132 with neither).

    Args:
        target: a ``Target`` or its name; None: the current target (``scope``), if any.
    """
    t = lookup(target) if target is not None else _current
    idx = gpu_index()
    if idx is not None:
        from tilus.runtime.driver import device_properties

        p = device_properties(idx)
        if t is None or (p["cc_major"], p["cc_minor"]) == t.compute_capability:
            return int(p["sm_count"])
    return (t or nvgpu_sm90a).properties.sm_count
