"""detops: deterministic CUDA kernels for PyTorch.

Importing this package loads ``libdetops.so``, which overrides the CUDA kernels of the ops listed by
:func:`covered_ops` with deterministic ones. Under ``torch.use_deterministic_algorithms(True)`` those
ops then run (bitwise reproducibly) instead of raising, or faster than stock's deterministic fallback.
Every override has a twin, ``torch.ops.detops.<name>.<overload>``, with the identical schema, that runs
the detops kernel on CPU and CUDA tensors whatever the mode.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
from typing import Iterator, List, Optional

import torch

from ._version import __version__
from .routing import (compile_routed, padding_routed, route_compile, route_padding, route_upsample,
                      upsample_routed)

__all__ = [
    "__version__",
    "compile_routed",
    "covered_ops",
    "covered_cpu_ops",
    "disable",
    "enable",
    "get_mode",
    "get_strict",
    "library_path",
    "load_library",
    "mode",
    "padding_routed",
    "route_compile",
    "route_padding",
    "route_upsample",
    "set_mode",
    "set_strict",
    "strict",
    "upsample_routed",
]

_MODES = ("auto", "always", "off")
_loaded_path: Optional[str] = None


def _candidates() -> List[pathlib.Path]:
    here = pathlib.Path(__file__).resolve().parent
    repo = here.parent.parent
    return [here / "libdetops.so", repo / "build" / "libdetops.so"]


def library_path() -> str:
    """Where ``libdetops.so`` is taken from: ``$DETOPS_LIBRARY``, else the package, else the build dir."""
    env = os.environ.get("DETOPS_LIBRARY")
    if env:
        if not os.path.isfile(env):
            raise FileNotFoundError(f"DETOPS_LIBRARY={env!r} does not name a file")
        return env
    for candidate in _candidates():
        if candidate.is_file():
            return str(candidate)
    searched = ", ".join(str(c) for c in _candidates())
    raise FileNotFoundError(
        f"libdetops.so not found (searched $DETOPS_LIBRARY, {searched}); build it with scripts/build.sh"
    )


def _check_environment() -> None:
    """A bad ``DETOPS_MODE`` is an error at import (the library itself only warns and uses ``auto``, since a
    library being loaded must never stop its host process)."""
    env_mode = os.environ.get("DETOPS_MODE", "")
    if env_mode and env_mode not in _MODES:
        raise ValueError(f"DETOPS_MODE={env_mode!r}: unknown mode; expected one of {_MODES}")
    env_strict = os.environ.get("DETOPS_STRICT", "")
    if env_strict not in ("", "0", "1"):
        raise ValueError(f"DETOPS_STRICT={env_strict!r}: expected '0' or '1'")


def _check_torch_version(built_for: str, running: str) -> None:
    """libdetops.so uses torch's C++ ABI: it loads only into the torch it was built against."""
    if built_for != running:
        raise ImportError(
            f"detops was built against torch {built_for}, but this environment has torch {running}; "
            "reinstall detops in this environment (pip install --force-reinstall --no-deps <detops source>)")


def _registered_by() -> Optional[List[str]]:
    """None while no copy of ``libdetops.so`` has registered the detops ops in this process; else the loaded
    libraries that may have (``torch.ops.load_library``'s, by name; empty where one is linked into a program)."""
    if not hasattr(torch.ops.detops, "get_mode"):
        return None
    return sorted(p for p in torch.ops.loaded_libraries if os.path.basename(p) == "libdetops.so")


def _same_file(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def load_library(path: Optional[str] = None) -> str:
    """Loads ``libdetops.so`` once and returns its path; a later call returns that path, and raises if ``path``
    names another file. Where a copy is already loaded (``torch.ops.load_library``), it is taken as it is if it is
    the file asked for (``path``, ``$DETOPS_LIBRARY``) or none is asked for; a second copy would register the
    detops namespace twice, which aborts the process, so any other raises ImportError."""
    global _loaded_path
    if _loaded_path is not None:
        if path is not None and not _same_file(path, _loaded_path):
            raise ImportError(f"detops.load_library({path!r}): detops is loaded from {_loaded_path}; one process "
                              "takes one copy of libdetops.so (a second registers its ops twice)")
        return _loaded_path
    _check_environment()
    asked = path or os.environ.get("DETOPS_LIBRARY") or None
    loaded = _registered_by()
    if loaded is not None:
        if asked is not None and not any(_same_file(asked, p) for p in loaded):
            where = ", ".join(loaded) or "a library linked into this program"
            raise ImportError(f"detops: the detops ops are already registered by {where}; loading {asked} "
                              "too would register them twice: load one copy")
        _loaded_path = loaded[0] if loaded else "(registered before import)"
        return _loaded_path
    resolved = path or library_path()
    if pathlib.Path(resolved).resolve().parent == pathlib.Path(__file__).resolve().parent:
        try:  # an installed wheel: libdetops.so beside the package, with the torch it was built for
            from . import _build_info
        except ImportError:
            _build_info = None
        if _build_info is not None:
            _check_torch_version(_build_info.TORCH_VERSION, torch.__version__)
    torch.ops.load_library(resolved)
    _loaded_path = resolved
    return _loaded_path


def set_mode(name: str) -> None:
    """``"auto"`` (default: detops when the deterministic flag is on), ``"always"`` or ``"off"``. Also turns
    the routing of ``F.pad(mode='replicate')``, ``F.interpolate(mode='bilinear'|'trilinear')`` and
    ``torch.compile`` to the aten ops on (auto, always) or off (off); see :func:`route_padding`,
    :func:`route_upsample` and :func:`route_compile`."""
    if name not in _MODES:
        raise ValueError(f"detops.set_mode(): unknown mode {name!r}; expected one of {_MODES}")
    torch.ops.detops.set_mode(name)
    route_padding(name != "off")
    route_upsample(name != "off")
    route_compile(name != "off")


def get_mode() -> str:
    return torch.ops.detops.get_mode()


def enable(name: str = "auto") -> None:
    """Turns the overrides on (``"auto"`` or ``"always"``)."""
    if name == "off":
        raise ValueError("detops.enable(): use detops.disable() to turn the overrides off")
    set_mode(name)


def disable() -> None:
    """Deregisters the overrides: the dispatcher serves the stock kernels again."""
    set_mode("off")


@contextlib.contextmanager
def mode(name: str) -> Iterator[None]:
    """Runs the block in mode ``name`` and restores the previous mode (and the three routings) afterwards."""
    previous, routed, upsampled, compiled = get_mode(), padding_routed(), upsample_routed(), compile_routed()
    set_mode(name)
    try:
        yield
    finally:
        set_mode(previous)
        route_padding(routed)
        route_upsample(upsampled)
        route_compile(compiled)


def _switch(fn: str, value) -> bool:
    """A switch's value: True or False (1 or 0); anything else, "0" or "off" say, raises."""
    if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
        return bool(value)
    raise TypeError(f"detops.{fn}(): expected True or False, but got {value!r}")


def set_strict(enabled: bool) -> None:
    """Strict mode validates indices on the host: an out-of-range index raises instead of killing the
    CUDA context (one device-to-host copy per call)."""
    torch.ops.detops.set_strict(_switch("set_strict", enabled))


def get_strict() -> bool:
    return bool(torch.ops.detops.get_strict())


@contextlib.contextmanager
def strict(enabled: bool = True) -> Iterator[None]:
    """Runs the block with strict mode on (or off) and restores the previous setting afterwards."""
    enabled = _switch("strict", enabled)
    previous = get_strict()
    set_strict(enabled)
    try:
        yield
    finally:
        set_strict(previous)


def covered_ops() -> List[str]:
    """The aten overloads detops overrides on CUDA, e.g. ``aten::index_add.out``."""
    return list(torch.ops.detops.covered_ops())


def covered_cpu_ops() -> List[str]:
    """The aten overloads detops overrides on the CPU, where stock's CPU kernel throws under the flag, e.g.
    ``aten::max_unpool2d`` (each is in :func:`covered_ops` too)."""
    return list(torch.ops.detops.covered_cpu_ops())


load_library()
route_padding(get_mode() != "off")  # F.pad(mode='replicate') on CUDA reaches detops' backward (detops.routing)
route_upsample(get_mode() != "off")  # so do F.interpolate's bilinear and trilinear modes
route_compile(get_mode() != "off")  # compiled graphs keep the covered aten calls (detops.routing)

from ._fake import register_all as _register_fakes  # noqa: E402

_register_fakes(covered_ops())

from ._functionalize import register_all as _register_functionalization  # noqa: E402

_register_functionalization(covered_ops())

from .repro import dataloader_kwargs, enable_determinism, machine_summary, seed_worker  # noqa: E402

__all__ += ["dataloader_kwargs", "enable_determinism", "machine_summary", "seed_worker"]

from .doctor import doctor  # noqa: E402

__all__ += ["doctor"]

from .audit import audit, audit_compiled  # noqa: E402

__all__ += ["audit", "audit_compiled"]
