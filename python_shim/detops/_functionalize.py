"""Functionalization of the writing twins: the in-place, ``.out`` and ``.grad_input`` overloads of
``torch.ops.detops``, whose aten schemas return an alias of an argument (``-> Tensor(a!)``).

torch functionalizes no custom operator with an aliased result by itself (AOTAutograd, so
``torch.compile`` and ``opcheck``'s ``test_aot_dispatch_dynamic``, raise). Each writing twin therefore gets
a ``Functionalize`` kernel that does what aten's generated functionalization kernels do for their own
in-place and out operators: sync and unwrap the arguments, call the functional result of the overload
(:data:`detops._fake.FUNCTIONAL_OVERLOADS`: the functional twin, or a functional companion operator defined
here for an operator without one), then ``replace`` each written argument's value with the matching result,
``commit_update`` and ``sync`` it, and return the written arguments. A traced graph then holds only the
functional operator; AOTAutograd copies the final value back into a mutated graph input.

Which overloads get a kernel is read from :func:`detops.covered_ops` and each schema's alias annotations;
the table in :mod:`detops._fake` only says which functional overload computes each one's result.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch._C import DispatchKey

__all__ = ["functional_overload", "register_all", "registered", "written_arguments"]

_LIBRARY = torch.library.Library("detops", "IMPL")
_REGISTERED: Dict[str, Any] = {}


def _define_put() -> None:
    """``detops::put``: the functional companion of ``put_`` (aten's ``put``: ``self.clone().put_(...)``),
    whose result is the detops kernel's on every device."""
    if hasattr(torch.ops.detops, "put"):
        return

    @torch.library.custom_op("detops::put", mutates_args=())
    def put(self: torch.Tensor, index: torch.Tensor, source: torch.Tensor,
            accumulate: bool = False) -> torch.Tensor:
        result = self.clone()
        torch.ops.detops.put_(result, index, source, accumulate)
        return result

    @put.register_fake
    def _(self, index, source, accumulate=False):
        return torch.empty_like(self)


def _define_index_put_impl() -> None:
    """``detops::_index_put_impl``: the functional companion of ``_index_put_impl_`` (aten's
    ``_index_put_impl``: ``self.clone()._index_put_impl_(...)``), whose result is the detops kernel's on every
    device."""
    if hasattr(torch.ops.detops, "_index_put_impl"):
        return

    @torch.library.custom_op("detops::_index_put_impl", mutates_args=())
    def _index_put_impl(self: torch.Tensor, indices: List[Optional[torch.Tensor]], values: torch.Tensor,
                        accumulate: bool = False, unsafe: bool = False) -> torch.Tensor:
        result = self.clone()
        torch.ops.detops._index_put_impl_(result, indices, values, accumulate, unsafe)
        return result

    @_index_put_impl.register_fake
    def _(self, indices, values, accumulate=False, unsafe=False):
        return torch.empty_like(self)


def _define_median(name: str) -> None:
    """``detops::median_dim`` / ``detops::nanmedian_dim``: the functional companions of ``median.dim_values``
    and ``nanmedian.dim_values`` (aten's ``median.dim``: fresh values and indices, then the out overload)."""
    if hasattr(torch.ops.detops, f"{name}_dim"):
        return
    twin = getattr(torch.ops.detops, name).dim_values

    # NB: the schema is spelled out: an inferred one would make dim a SymInt, not aten's int.
    @torch.library.custom_op(f"detops::{name}_dim", mutates_args=(),
                             schema="(Tensor self, int dim, bool keepdim=False) -> (Tensor, Tensor)")
    def median_dim(self: torch.Tensor, dim: int, keepdim: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
        values = self.new_empty((0,))
        indices = self.new_empty((0,), dtype=torch.int64)
        twin(self, dim, keepdim, values=values, indices=indices)
        return values, indices

    @median_dim.register_fake
    def _(self, dim, keepdim=False):
        from ._fake import FUNCTIONAL_RESULTS

        return FUNCTIONAL_RESULTS[name](self, dim, keepdim)


_COMPANIONS = {"detops::put": _define_put, "detops::_index_put_impl": _define_index_put_impl,
               "detops::median_dim": lambda: _define_median("median"),
               "detops::nanmedian_dim": lambda: _define_median("nanmedian")}


def written_arguments(overload: torch._ops.OpOverload) -> List[str]:
    """The names of the arguments ``overload`` writes (``Tensor(a!)``), in schema order."""
    return [a.name for a in overload._schema.arguments if a.alias_info is not None and a.alias_info.is_write]


def functional_overload(op: str) -> torch._ops.OpOverload:
    """The ``torch.ops.detops`` overload computing the result of the writing overload ``op``
    (``aten::name[.overload]`` spelling), from :data:`detops._fake.FUNCTIONAL_OVERLOADS`."""
    from ._fake import FUNCTIONAL_OVERLOADS

    if op not in FUNCTIONAL_OVERLOADS:
        raise KeyError(f"{op} writes an argument but has no entry in detops._fake.FUNCTIONAL_OVERLOADS")
    target = FUNCTIONAL_OVERLOADS[op]
    namespace, _, rest = target.partition("::")
    if namespace == "detops":
        _COMPANIONS[target]()
    name, _, overload = rest.partition(".")
    return getattr(getattr(torch.ops.detops, name), overload or "default")


def _bind(schema, args: Sequence[Any], kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """Every argument of ``schema`` by name, defaults filled in."""
    bound: Dict[str, Any] = {}
    positional = [a for a in schema.arguments if not a.kwarg_only]
    for arg, value in zip(positional, args):
        bound[arg.name] = value
    for arg in schema.arguments:
        if arg.name in bound:
            continue
        if arg.name in kwargs:
            bound[arg.name] = kwargs[arg.name]
        elif arg.has_default_value():
            bound[arg.name] = arg.default_value
        else:
            raise TypeError(f"{schema.name}: missing argument {arg.name!r}")
    return bound


def _unwrap(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and torch._is_functional_tensor(value):
        torch._sync(value)
        return torch._from_functional_tensor(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap(v) for v in value)
    return value


def _call(overload: torch._ops.OpOverload, bound: Dict[str, Any]) -> Tuple[torch.Tensor, ...]:
    args = [bound[a.name] for a in overload._schema.arguments if not a.kwarg_only]
    kwargs = {a.name: bound[a.name] for a in overload._schema.arguments if a.kwarg_only}
    result = overload(*args, **kwargs)
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def _kernel(writing: torch._ops.OpOverload, functional: torch._ops.OpOverload):
    schema = writing._schema
    written = written_arguments(writing)
    taken = {a.name for a in functional._schema.arguments}
    dropped = [name for name in written if name not in taken]  # the out arguments

    def functionalize(*args, **kwargs):
        bound = _bind(schema, args, kwargs)
        targets = [bound[name] for name in written]
        if not all(torch._is_functional_tensor(t) for t in targets):
            # A written tensor from outside the functionalized region (e.g. captured by the function): as
            # aten does, the writing overload itself runs on it, with the other arguments unwrapped.
            with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(DispatchKey.Functionalize)):
                return writing(*[_unwrap(v) for v in args], **{k: _unwrap(v) for k, v in kwargs.items()})
        inputs = {name: _unwrap(value) for name, value in bound.items() if name not in dropped}
        with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(DispatchKey.Functionalize)):
            results = _call(functional, inputs)
        # NB: as aten's functionalization of its own in-place and out operators: the written argument takes
        # the functional result's value, then its pending update is committed and its aliases synced.
        for target, result in zip(targets, results):
            torch._functionalize_replace(target, result)
            torch._functionalize_commit_update(target)
            torch._functionalize_sync(target)
        return targets[0] if len(targets) == 1 else tuple(targets)

    return functionalize


def register_all(covered: Sequence[str]) -> List[str]:
    """Registers the ``Functionalize`` kernel of every twin in ``covered`` that writes an argument (once per
    overload); returns the writing overloads without a :data:`detops._fake.FUNCTIONAL_OVERLOADS` line (they
    keep torch's behaviour: no functionalization)."""
    from ._fake import FUNCTIONAL_OVERLOADS

    missing = []
    for op in covered:
        name, _, overload = op.split("::", 1)[1].partition(".")
        twin = getattr(getattr(torch.ops.detops, name), overload or "default")
        if not written_arguments(twin) or op in _REGISTERED:
            continue
        if op not in FUNCTIONAL_OVERLOADS:
            missing.append(op)
            continue
        kernel = _kernel(twin, functional_overload(op))
        _LIBRARY.impl(twin, kernel, "Functionalize")
        _REGISTERED[op] = kernel
    return missing


def registered() -> List[str]:
    """The writing overloads that have a Functionalize kernel."""
    return list(_REGISTERED)
