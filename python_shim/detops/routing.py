"""Three switches that send calls that stock PyTorch takes around the aten ops to the aten ops, which the
overrides catch: ``route_padding`` (eager ``F.pad(mode='replicate')``), ``route_upsample`` (eager
``F.interpolate(mode='bilinear'|'trilinear')``) and ``route_compile`` (``torch.compile`` with inductor).

``route_padding``. Under ``torch.use_deterministic_algorithms(True)``, stock ``torch.nn.functional.pad`` sends
``mode='replicate'`` on a CUDA (or XPU) tensor to a Python decomposition,
``torch._decomp.decompositions._replication_pad`` (``_unsafe_index`` gathers whose backward is a chain of
accumulating ``_unsafe_index_put``: deterministic, slow). The aten ops ``replication_pad{1,2,3}d`` and
their backwards, which detops overrides, are then never reached from ``F.pad`` or ``nn.ReplicationPad*d``.
Every other case (flag off, CPU, other modes) already calls ``torch._C._nn.pad``, the aten path.
While routing is on, that decomposition, looked up by ``F.pad`` on each call, is replaced by a function
that calls ``torch._C._nn.pad(input, pad, "replicate")`` for CUDA tensors (so the forward is the aten op and
the backward the detops kernel) and the stock decomposition for anything else. Nothing else is changed;
turning routing off puts the original function object back, so stock's routing is restored exactly.
Code that imported the decomposition function itself, or that traced ``F.pad`` before the switch, is not
affected.

``route_upsample``. Likewise stock ``torch.nn.functional.interpolate`` sends ``mode='bilinear'`` (4-D, without
antialias) and ``mode='trilinear'`` (5-D) on a tensor that is not on the CPU to
``torch._decomp.decompositions._upsample_linear_vec`` (gathers whose backward is ``index_put`` with
accumulation), so ``upsample_bilinear2d_backward`` and ``upsample_trilinear3d_backward`` are never reached
from ``F.interpolate`` or ``nn.Upsample`` under the flag; ``linear`` and ``bicubic`` call the aten ops. While
routing is on, that function, looked up by ``F.interpolate`` on each call, is replaced by one that calls
``torch._C._nn.upsample_bilinear2d`` / ``upsample_trilinear3d`` with the same output size, scale factors and
``align_corners`` for CUDA tensors and the stock function for anything else. The decomposition tables keep
the stock function; turning routing off puts the original function object back.

``route_compile``. Inductor decomposes some covered overloads before it lowers a graph
(``torch._inductor.decomposition.decompositions``): ``index_add`` becomes ``index_put`` with
``accumulate=True``, ``index_copy`` an ``index_put``, ``put_``, ``index_reduce``, ``nll_loss2d_forward`` and the
``reflection_pad*d_backward`` overloads other aten calls, so a compiled model never calls the overridden
overload. While routing is on, every overload of :func:`detops.covered_ops` is taken out of that table
(inductor then calls the aten overload as an extern kernel, which the override catches on CUDA); turning it
off puts the very same entries back. Inductor is imported lazily: if it is not imported yet, the switch is
applied when it is. The FX-graph and AOTAutograd caches key compiled graphs on
``torch.compiler.config.cache_key_tag``; while routing is on, ``detops.route_compile`` is appended to it,
so a graph compiled with the other setting is never reused (turning routing off takes it out again, and the
rest of the tag, whoever set it, is kept). Functions
already compiled keep the graph they were compiled with: call ``torch._dynamo.reset()`` after a change.

``import detops`` turns the three switches on in modes ``auto`` and ``always`` and off in mode ``off``;
:func:`detops.set_mode` (and ``enable``, ``disable``, the ``mode`` context manager) does the same on every
change, and ``detops.mode`` restores the previous state on exit. ``route_padding``, ``route_upsample`` and
``route_compile`` set them by hand. The switches live in Python: ``torch.ops.detops.set_mode`` and ``detops::set_mode`` in C++ leave
them as they are.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Any, Callable, Dict, List

import torch
import torch._decomp.decompositions as _decompositions
import torch.compiler.config as _compiler_config

__all__ = ["compile_routed", "padding_routed", "route_compile", "route_padding", "route_upsample",
           "upsample_routed"]

# What F.pad calls today: the stock decomposition (or whatever stood there when detops was imported).
_STOCK_REPLICATION_PAD = _decompositions._replication_pad
# What F.interpolate calls for bilinear and trilinear under the flag off the CPU: the stock decomposition.
_STOCK_UPSAMPLE_LINEAR_VEC = _decompositions._upsample_linear_vec


def _routed_replication_pad(a: torch.Tensor, padding):
    """F.pad's deterministic replicate path with routing on: the aten op for CUDA tensors."""
    if a.is_cuda:
        return torch._C._nn.pad(a, padding, "replicate", None)
    return _STOCK_REPLICATION_PAD(a, padding)


def route_padding(enabled: bool) -> bool:
    """Turns the routing of ``F.pad(mode='replicate')`` on CUDA under the deterministic flag to the aten op
    on (``True``) or off (``False``, stock's decomposition); returns the previous state."""
    previous = padding_routed()
    _decompositions._replication_pad = _routed_replication_pad if enabled else _STOCK_REPLICATION_PAD
    return previous


def padding_routed() -> bool:
    """True while ``F.pad(mode='replicate')`` on CUDA under the flag is routed to the aten op."""
    return _decompositions._replication_pad is _routed_replication_pad


def _routed_upsample_linear_vec(input: torch.Tensor, output_size, align_corners, scale_factors):
    """F.interpolate's deterministic bilinear/trilinear path with routing on: the aten op for CUDA tensors."""
    if input.is_cuda and input.dim() == 4:
        return torch._C._nn.upsample_bilinear2d(input, output_size, align_corners, scale_factors)
    if input.is_cuda and input.dim() == 5:
        return torch._C._nn.upsample_trilinear3d(input, output_size, align_corners, scale_factors)
    return _STOCK_UPSAMPLE_LINEAR_VEC(input, output_size, align_corners, scale_factors)


def route_upsample(enabled: bool) -> bool:
    """Turns the routing of ``F.interpolate(mode='bilinear'|'trilinear')`` on CUDA under the deterministic
    flag to the aten ops on (``True``) or off (``False``, stock's decomposition); returns the previous state."""
    previous = upsample_routed()
    _decompositions._upsample_linear_vec = _routed_upsample_linear_vec if enabled else _STOCK_UPSAMPLE_LINEAR_VEC
    return previous


def upsample_routed() -> bool:
    """True while ``F.interpolate(mode='bilinear'|'trilinear')`` on CUDA under the flag is routed to the aten
    ops."""
    return _decompositions._upsample_linear_vec is _routed_upsample_linear_vec


_INDUCTOR_DECOMPOSITION = "torch._inductor.decomposition"
COMPILE_CACHE_TAG = "detops.route_compile"
# The entries route_compile took out of inductor's decomposition table, to be put back as they were.
_taken: Dict[Any, Callable[..., Any]] = {}
_compile_state = {"routed": False}


def _covered_aten_overloads() -> List[Any]:
    overloads = []
    for op in torch.ops.detops.covered_ops():
        name, _, overload = op.split("::", 1)[1].partition(".")
        overloads.append(getattr(getattr(torch.ops.aten, name), overload or "default"))
    return overloads


def _apply_to_inductor(module) -> None:
    table = module.decompositions
    if _compile_state["routed"]:
        for op in _covered_aten_overloads():
            if op in table:
                _taken[op] = table.pop(op)
    else:
        table.update(_taken)
        _taken.clear()
    module.fast_random_decomps.cache_clear()  # a cached copy of the table


class _ApplyOnImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Applies the switch to torch._inductor.decomposition right after it is first imported."""

    def find_spec(self, fullname, path, target=None):
        if fullname != _INDUCTOR_DECOMPOSITION:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        self._loader = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _apply_to_inductor(module)


_HOOK = _ApplyOnImport()


def _tagged(tag: str, routed: bool) -> str:
    """``tag`` with ``+detops.route_compile`` at its end (routed) or nowhere: the rest, whoever set it, kept."""
    parts = [p for p in (tag or "").split("+") if p != COMPILE_CACHE_TAG]
    rest = "+".join(parts)
    if not routed:
        return rest
    return f"{rest}+{COMPILE_CACHE_TAG}" if rest else COMPILE_CACHE_TAG


def _set_cache_tag(routed: bool) -> None:
    # NB: only our part of the tag changes: a tag the user sets while routing is on (or off) stays.
    _compiler_config.cache_key_tag = _tagged(_compiler_config.cache_key_tag, routed)


def route_compile(enabled: bool) -> bool:
    """Takes every covered overload out of inductor's decomposition table (``True``), so compiled graphs call
    the aten overloads the overrides catch, or puts stock's entries back (``False``); returns the previous
    state."""
    previous = compile_routed()
    _compile_state["routed"] = bool(enabled)
    _set_cache_tag(bool(enabled))
    module = sys.modules.get(_INDUCTOR_DECOMPOSITION)
    if module is not None:
        _apply_to_inductor(module)
    elif _HOOK not in sys.meta_path:
        sys.meta_path.insert(0, _HOOK)
    return previous


def compile_routed() -> bool:
    """True while covered overloads are kept out of inductor's decomposition table."""
    return _compile_state["routed"]
