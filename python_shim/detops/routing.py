"""Routing of ``F.pad(mode='replicate')`` on CUDA to the aten op whose backward detops covers.

Under ``torch.use_deterministic_algorithms(True)``, stock ``torch.nn.functional.pad`` sends
``mode='replicate'`` on a CUDA (or XPU) tensor to a Python decomposition,
``torch._decomp.decompositions._replication_pad`` (``_unsafe_index`` gathers whose backward is a chain of
accumulating ``_unsafe_index_put``: deterministic, slow). The aten ops ``replication_pad{1,2,3}d`` and
their backwards, which detops overrides, are then never reached from ``F.pad`` or ``nn.ReplicationPad*d``.
Every other case (flag off, CPU, other modes) already calls ``torch._C._nn.pad``, the aten path.

While routing is on, that decomposition, looked up by ``F.pad`` on each call, is replaced by a function
that calls ``torch._C._nn.pad(input, pad, "replicate")`` for CUDA tensors (so the forward is the aten op and
the backward the detops kernel) and the stock decomposition for anything else. Nothing else is changed;
turning routing off puts the original function object back, so stock's routing is restored exactly.

``import detops`` turns routing on in modes ``auto`` and ``always`` and off in mode ``off``;
:func:`detops.set_mode` (and ``enable``, ``disable``, the ``mode`` context manager) does the same on every
change, and ``detops.mode`` restores the previous state on exit. ``route_padding`` sets it by hand. The
switch lives in Python: ``torch.ops.detops.set_mode`` and ``detops::set_mode`` in C++ leave it as it is.
Code that imported the decomposition function itself, or that traced ``F.pad`` before the switch, is not
affected.
"""

from __future__ import annotations

import torch
import torch._decomp.decompositions as _decompositions

__all__ = ["padding_routed", "route_padding"]

# What F.pad calls today: the stock decomposition (or whatever stood there when detops was imported).
_STOCK_REPLICATION_PAD = _decompositions._replication_pad


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
