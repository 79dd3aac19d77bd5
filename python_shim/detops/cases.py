"""Benchmark and report cases, registered by aten overload name.

A case is one aten overload (spelled as :func:`detops.covered_ops` spells it, e.g. ``aten::index_add_``)
at one named shape. Its builder makes a fresh, random (never zero) set of arguments on a device; the same
arguments call the stock aten op and the detops twin ``torch.ops.detops.<name>.<overload>``, whose
schemas are identical. ``full=True`` gives the shapes measured on a GPU (the issue's shapes: low and high
contention, one hot destination, wide rows, model shapes); ``full=False`` a small shape of the same kind
for the CPU parts.

Cases are registered for ops that are not covered yet; :func:`cases` keeps only the covered ones, so an
op that lands later is benchmarked and reported without touching this file's callers.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, Dict, Iterable, List, Optional, Tuple

import torch

__all__ = ["Call", "Case", "cases", "all_cases", "aten_op", "stock_cpu_op", "twin_op", "stock_under_flag", "fresh_args", "copy_tensor",
           "output_tensors"]


@dataclasses.dataclass
class Call:
    """One set of arguments for an op, and the fewest bytes the op must read and write for it."""

    args: tuple
    kwargs: dict
    min_bytes: int

    def nbytes(self) -> int:
        """Bytes held by the tensors of this call (for rotating inputs through the L2 cache)."""
        seen, total = set(), 0
        for t in list(self.args) + list(self.kwargs.values()):
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in seen:
                seen.add(t.untyped_storage().data_ptr())
                total += t.untyped_storage().nbytes()
        return total


Builder = Callable[[torch.device, torch.Generator, bool], Call]


@dataclasses.dataclass(frozen=True)
class Case:
    op: str  # "aten::<name>" or "aten::<name>.<overload>"
    shape: str
    build: Builder
    what: str  # one line: the shape in words
    # Stock's CPU computation of the same result, same arguments, for an op without a CPU kernel
    # (cudnn_grid_sampler_backward); None: the aten op itself.
    stock_cpu: Optional[Callable] = None

    @property
    def name(self) -> str:
        return self.op.split("::", 1)[1].split(".", 1)[0]

    @property
    def overload(self) -> str:
        rest = self.op.split("::", 1)[1]
        return rest.split(".", 1)[1] if "." in rest else "default"


def _resolve(namespace, op: str):
    case = Case(op, "", lambda *a: None, "")
    packet = getattr(namespace, case.name)
    return getattr(packet, case.overload)


def aten_op(op: str):
    """The aten OpOverload, e.g. ``torch.ops.aten.index_add.out`` for ``aten::index_add.out``."""
    return _resolve(torch.ops.aten, op)


def stock_cpu_op(case: "Case"):
    """What the CPU comparisons call as stock for ``case``: the aten op, or the case's own CPU reference."""
    return case.stock_cpu if case.stock_cpu is not None else aten_op(case.op)


def twin_op(op: str):
    """The detops twin with the identical schema, or None where detops has none."""
    try:
        return _resolve(torch.ops.detops, op)
    except (AttributeError, RuntimeError):
        return None


def copy_tensor(v: torch.Tensor, device=None, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """A copy of ``v`` (optionally moved and converted) that keeps its broadcast (stride 0) dimensions broadcast,
    as message passing's expanded index: a plain copy would materialize them and change the path an op takes."""
    keep = tuple(slice(0, 1) if st == 0 and sz > 1 else slice(None) for st, sz in zip(v.stride(), v.shape))
    compact = v[keep] if v.dim() else v
    out = compact.to(device=v.device if device is None else device, dtype=v.dtype if dtype is None else dtype,
                     copy=True)
    return out.expand(v.shape) if compact.shape != v.shape else out


def fresh_args(call: Call, device=None, float_dtype: Optional[torch.dtype] = None) -> Tuple[tuple, dict]:
    """A fresh copy of the call's arguments (in-place and ``.out`` overloads write into them), optionally
    moved to ``device`` and with every floating-point tensor converted to ``float_dtype``. Build a call on
    the CPU from a seeded generator and copy it to each device: every device then sees the same bits."""
    def copy(v):
        if isinstance(v, torch.Tensor):
            dtype = float_dtype if float_dtype is not None and v.is_floating_point() else v.dtype
            return copy_tensor(v, device, dtype)
        if isinstance(v, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in v):
            return type(v)(copy(x) for x in v)
        return v

    return tuple(copy(a) for a in call.args), {k: copy(v) for k, v in call.kwargs.items()}


def output_tensors(result) -> List[torch.Tensor]:
    """An op's result as a flat list of tensors (a tensor, or a tuple/list of them)."""
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (list, tuple)):
        return [t for r in result for t in output_tensors(r)]
    return []


def stock_under_flag(op: str) -> str:
    """What stock PyTorch does on CUDA under the deterministic flag for ``op``, in words, from
    :mod:`detops.stock_table` (the one statement of it)."""
    from . import stock_table

    entries = stock_table.STOCK_TABLE.get(op, ())
    if not entries:
        return "deterministic"
    words = []
    for e in entries:
        if e.kind == stock_table.THROWS:
            what = "throws"
        elif e.kind == stock_table.DETERMINISTIC:
            what = "deterministic"
        elif e.kind == stock_table.ATOMICS:
            what = f"no alert, atomics ({e.alert})"
        else:
            what = f"slow fallback ({e.alert})"
        words.append(f"{what} {e.when}".strip() if e.when else what)
    if all(e.applies is not None for e in entries):
        words.append("deterministic otherwise")
    return "; ".join(words)


_REGISTRY: List[Case] = []


def register(op: str, shape: str, what: str, stock_cpu: Optional[Callable] = None) -> Callable[[Builder], Builder]:
    def wrap(build: Builder) -> Builder:
        _REGISTRY.append(Case(op, shape, build, what, stock_cpu))
        return build

    return wrap


def all_cases() -> List[Case]:
    return list(_REGISTRY)


def cases(covered: Optional[Iterable[str]] = None, ops: Optional[Iterable[str]] = None,
          shapes: Optional[Iterable[str]] = None) -> List[Case]:
    """The registered cases whose op is covered (default: :func:`detops.covered_ops`), optionally
    filtered by op names (``index_add_`` or ``aten::index_add_``) and shape names."""
    if covered is None:
        import detops

        covered = detops.covered_ops()
    covered = set(covered)
    wanted_ops = None if ops is None else {o if o.startswith("aten::") else "aten::" + o for o in ops}
    wanted_shapes = None if shapes is None else set(shapes)
    return [c for c in _REGISTRY if c.op in covered and (wanted_ops is None or c.op in wanted_ops)
            and (wanted_shapes is None or c.shape in wanted_shapes)]


# ---------------------------------------------------------------------------------------------------
# Helpers. Data is random and never zero: values from randn (zeros have probability ~0 and would make
# adds trivially exact), indices from randint. Drawn on the generator's device (fast on a GPU), then
# moved to the case's device.

F32 = torch.float32
ES = 4  # element size of the benchmarked dtype


def _randn(shape, g, device, dtype=F32) -> torch.Tensor:
    return torch.randn(shape, generator=g, device=g.device).to(device=device, dtype=dtype)


def _randint(high, shape, g, device) -> torch.Tensor:
    return torch.randint(0, high, shape, generator=g, device=g.device).to(device)


def _rand(shape, g, device) -> torch.Tensor:
    return torch.rand(shape, generator=g, device=g.device).to(device)


def _touched(index: torch.Tensor) -> int:
    return int(torch.unique(index.flatten()).numel())


# Three overloads per family: functional, in-place, .out (or .grad_input). `kind` says which.
def _finish(kind: str, args: tuple, kwargs: dict, out_like: torch.Tensor, out_kw: str = "out") -> Tuple[tuple, dict]:
    if kind == "out":
        kwargs = dict(kwargs)
        kwargs[out_kw] = torch.empty_like(out_like)
    return args, kwargs


# ---------------------------------------------------------------------------------------------------
# index_add: self [M, D], index [N] into dim 0, source [N, D], alpha 0.5.

_INDEX_ADD_SHAPES = {
    # shape: ((M, N, D) on a GPU, (M, N, D) small), in words
    "low_contention": (((1 << 20), (1 << 20), 16), ((1 << 13), (1 << 13), 16),
                       "destinations = contributions, random rows of 16 floats"),
    "high_contention": ((1000, (1 << 20), 16), (100, (1 << 13), 16), "1,000 destinations, 16 floats per row"),
    "hot_destination": ((1, (1 << 20), 1), (1, (1 << 15), 1), "every contribution to one destination"),
    "wide_rows": (((1 << 20), 100_000, 256), ((1 << 12), 2000, 256),
                  "embedding table 1M x 256, 100k random rows added"),
}


def _index_add_builder(kind: str, dims_full, dims_small) -> Builder:
    def build(device, g, full: bool) -> Call:
        m, n, d = dims_full if full else dims_small
        self_ = _randn((m, d), g, device)
        index = _randint(m, (n,), g, device)
        source = _randn((n, d), g, device)
        args, kwargs = _finish(kind, (self_, 0, index, source), {"alpha": 0.5}, self_)
        touched = _touched(index) if kind == "inplace" else m
        return Call(args, kwargs, min_bytes=n * d * ES + n * 8 + 2 * touched * d * ES)

    return build


def _scatter_add_builder(kind: str, self_shape, src_shape, high: int, expand: bool = False) -> Callable:
    def make(device, g) -> Call:
        self_ = _randn(self_shape, g, device)
        if expand:  # message passing: one destination row per edge, broadcast over the features
            index = _randint(high, (src_shape[0], 1), g, device).expand(src_shape)
        else:
            index = _randint(high, src_shape, g, device)
        src = _randn(src_shape, g, device)
        args, kwargs = _finish(kind, (self_, 0, index, src), {}, self_)
        numel_self, numel_src = self_.numel(), src.numel()
        index_bytes = (src_shape[0] if expand else numel_src) * 8
        touched = (_touched(index[:, 0]) * src_shape[1] if expand else _touched(index)) if kind == "inplace" \
            else numel_self
        return Call(args, kwargs, min_bytes=numel_src * ES + index_bytes + 2 * touched * ES)

    return make


_SCATTER_ADD_SHAPES = {
    # shape: (self shape, src shape, index range) on a GPU, the same small, in words
    "low_contention": ((((1 << 22),), ((1 << 22),), 1 << 22), (((1 << 15),), ((1 << 15),), 1 << 15),
                       "1-D, destinations = contributions = 4M"),
    "high_contention": (((1000,), ((1 << 22),), 1000), ((100,), ((1 << 15),), 100),
                        "1-D, 4M contributions into 1,000 destinations"),
    "hot_destination": (((1,), ((1 << 20),), 1), ((1,), ((1 << 15),), 1), "1-D, 1M contributions into one"),
    "message_passing": (((100_000, 64), ((1 << 20), 64), 100_000), ((2000, 64), ((1 << 13), 64), 2000),
                        "GNN: 1M edges x 64 features into 100k nodes, index expanded over features"),
}

_KINDS = {"": "functional", "_": "inplace", ".out": "out"}

for _suffix, _kind in _KINDS.items():
    for _shape, (_full, _small, _what) in _INDEX_ADD_SHAPES.items():
        register(f"aten::index_add{_suffix}", _shape, _what)(_index_add_builder(_kind, _full, _small))
    for _shape, (_full, _small, _what) in _SCATTER_ADD_SHAPES.items():
        _big = _scatter_add_builder(_kind, *_full, expand=_shape == "message_passing")
        _little = _scatter_add_builder(_kind, *_small, expand=_shape == "message_passing")
        register(f"aten::scatter_add{_suffix}", _shape, _what)(
            (lambda big, little: lambda device, g, full: (big if full else little)(device, g))(_big, _little))


# ---------------------------------------------------------------------------------------------------
# bincount(self, weights, minlength): 1M values with float weights.

def _bincount_builder(kind: str, n_full: int, n_small: int, bins_full: int, bins_small: int) -> Builder:
    def build(device, g, full: bool) -> Call:
        n, bins = (n_full, bins_full) if full else (n_small, bins_small)
        values = _randint(bins, (n,), g, device)
        weights = _randn((n,), g, device)
        kwargs = {"weights": weights, "minlength": bins}
        if kind == "out":
            kwargs["out"] = torch.empty(bins, dtype=torch.float32, device=device)
        return Call((values,), kwargs, min_bytes=n * 8 + n * ES + bins * ES)

    return build


for _suffix, _kind in (("", "functional"), (".out", "out")):
    register(f"aten::bincount{_suffix}", "low_contention", "1M weighted values into 1M bins")(
        _bincount_builder(_kind, 1 << 20, 1 << 14, 1 << 20, 1 << 14))
    register(f"aten::bincount{_suffix}", "high_contention", "1M weighted values into 1,000 bins")(
        _bincount_builder(_kind, 1 << 20, 1 << 14, 1000, 100))
    register(f"aten::bincount{_suffix}", "hot_destination", "1M weighted values into one bin")(
        _bincount_builder(_kind, 1 << 20, 1 << 14, 1, 1))


# ---------------------------------------------------------------------------------------------------
# Pooling backwards (model shapes).

def _pool_call(kind: str, grad_output: torch.Tensor, self_: torch.Tensor, extra: tuple,
               out_kw: str = "grad_input") -> Call:
    args = (grad_output, self_) + extra
    args, kwargs = _finish(kind, args, {}, self_, out_kw)
    return Call(args, kwargs, min_bytes=grad_output.numel() * ES + self_.numel() * ES
                + sum(t.numel() * 8 for t in extra if isinstance(t, torch.Tensor)))


def _adaptive_avg(kind: str, full_shape, small_shape, out_size, out_kw="grad_input") -> Builder:
    def build(device, g, full: bool) -> Call:
        shape = full_shape if full else small_shape
        self_ = _randn(shape, g, device)
        grad_output = _randn(shape[:2] + out_size, g, device)
        return _pool_call(kind, grad_output, self_, (), out_kw)

    return build


# ResNet-50's head: [N, 2048, 7, 7] -> 1x1, batch 256.
register("aten::_adaptive_avg_pool2d_backward", "resnet50_head", "ResNet-50 avgpool: 256x2048x7x7 -> 1x1")(
    _adaptive_avg("functional", (256, 2048, 7, 7), (4, 64, 7, 7), (1, 1)))
# A 3-D CNN head (R(2+1)D / I3D style): [N, 512, 4, 7, 7] -> 1x1x1, batch 32.
for _op, _kind in (("aten::_adaptive_avg_pool3d_backward", "functional"),
                   ("aten::adaptive_avg_pool3d_backward.grad_input", "out")):
    register(_op, "cnn3d_head", "3-D CNN head: 32x512x4x7x7 -> 1x1x1")(
        _adaptive_avg(_kind, (32, 512, 4, 7, 7), (2, 16, 4, 7, 7), (1, 1, 1)))
    register(_op, "cnn3d_overlap", "3-D pool with overlapping windows: 8x64x16x56x56 -> 5x9x9")(
        _adaptive_avg(_kind, (8, 64, 16, 56, 56), (1, 4, 8, 14, 14), (5, 9, 9)))


def _adaptive_max(kind: str, dims: int, full_shape, small_shape, out_size) -> Builder:
    forward = torch.ops.aten.adaptive_max_pool2d if dims == 2 else torch.ops.aten.adaptive_max_pool3d

    def build(device, g, full: bool) -> Call:
        self_ = _randn(full_shape if full else small_shape, g, device)
        out, indices = forward(self_, list(out_size))
        return _pool_call(kind, _randn(out.shape, g, device), self_, (indices,))

    return build


for _suffix, _kind in (("", "functional"), (".grad_input", "out")):
    register(f"aten::adaptive_max_pool2d_backward{_suffix}", "overlap", "64x256x56x56 -> 9x9, overlapping")(
        _adaptive_max(_kind, 2, (64, 256, 56, 56), (2, 8, 28, 28), (9, 9)))
    register(f"aten::adaptive_max_pool3d_backward{_suffix}", "cnn3d_overlap", "8x64x16x56x56 -> 5x9x9")(
        _adaptive_max(_kind, 3, (8, 64, 16, 56, 56), (1, 4, 8, 14, 14), (5, 9, 9)))


# A 3-D CNN stem pool: kernel 3, stride 2, padding 1 over [8, 64, 16, 112, 112].
_POOL3D_FULL, _POOL3D_SMALL = (8, 64, 16, 112, 112), (1, 4, 8, 16, 16)


def _avg_pool3d(kind: str) -> Builder:
    def build(device, g, full: bool) -> Call:
        self_ = _randn(_POOL3D_FULL if full else _POOL3D_SMALL, g, device)
        out = torch.ops.aten.avg_pool3d(self_, [3, 3, 3], [2, 2, 2], [1, 1, 1], False, True, None)
        extra = ([3, 3, 3], [2, 2, 2], [1, 1, 1], False, True, None)
        return _pool_call(kind, _randn(out.shape, g, device), self_, extra)

    return build


def _max_pool3d(kind: str) -> Builder:
    def build(device, g, full: bool) -> Call:
        self_ = _randn(_POOL3D_FULL if full else _POOL3D_SMALL, g, device)
        out, indices = torch.ops.aten.max_pool3d_with_indices(self_, [3, 3, 3], [2, 2, 2], [1, 1, 1], [1, 1, 1],
                                                              False)
        extra = ([3, 3, 3], [2, 2, 2], [1, 1, 1], [1, 1, 1], False, indices)
        call = _pool_call(kind, _randn(out.shape, g, device), self_, extra)
        call.min_bytes += indices.numel() * 8
        return call

    return build


def _fractional_max(kind: str, dims: int) -> Builder:
    forward = torch.ops.aten.fractional_max_pool2d if dims == 2 else torch.ops.aten.fractional_max_pool3d
    full_shape = (32, 64, 112, 112) if dims == 2 else (8, 32, 16, 56, 56)
    small_shape = (2, 4, 16, 16) if dims == 2 else (1, 2, 8, 12, 12)
    kernel = [3] * dims

    def build(device, g, full: bool) -> Call:
        shape = full_shape if full else small_shape
        self_ = _randn(shape, g, device)
        output_size = [s * 5 // 8 for s in shape[2:]]
        samples = _rand((shape[0], shape[1], dims), g, device)
        out, indices = forward(self_, kernel, output_size, samples)
        extra = (kernel, output_size, indices)
        call = _pool_call(kind, _randn(out.shape, g, device), self_, extra)
        call.min_bytes += indices.numel() * 8
        return call

    return build


for _suffix, _kind in (("", "functional"), (".grad_input", "out")):
    register(f"aten::avg_pool3d_backward{_suffix}", "cnn3d_stem", "3-D CNN stem: 8x64x16x112x112, k3 s2 p1")(
        _avg_pool3d(_kind))
    register(f"aten::max_pool3d_with_indices_backward{_suffix}", "cnn3d_stem",
             "3-D CNN stem: 8x64x16x112x112, k3 s2 p1")(_max_pool3d(_kind))
    register(f"aten::fractional_max_pool2d_backward{_suffix}", "overlap", "32x64x112x112, k3 -> 5/8 size")(
        _fractional_max(_kind, 2))
    register(f"aten::fractional_max_pool3d_backward{_suffix}", "overlap", "8x32x16x56x56, k3 -> 5/8 size")(
        _fractional_max(_kind, 3))


# ---------------------------------------------------------------------------------------------------
# CTC loss backward: speech, T=500, N=32, C=30, S=100.

def _ctc(overload: str) -> Builder:
    def build(device, g, full: bool) -> Call:
        t, n, c, s = (500, 32, 30, 100) if full else (50, 4, 10, 10)
        log_probs = _randn((t, n, c), g, device).log_softmax(2)
        targets = _randint(c - 1, (n, s), g, device) + 1
        input_lengths = _randint(t // 10 + 1, (n,), g, "cpu") + t * 9 // 10
        target_lengths = _randint(s // 5 + 1, (n,), g, "cpu") + s * 8 // 10
        nll, log_alpha = torch.ops.aten._ctc_loss(log_probs, targets, input_lengths.tolist(),
                                                  target_lengths.tolist(), 0, False)
        # NB: stock leaves the cells of log_alpha ([N, T, 2 * max target length + 1]) that no one reads (t >= input
        # length, s > 2 * target length) as torch.empty left them; -inf there makes the inputs the same bits on
        # every run.
        steps = torch.arange(log_alpha.size(1)).view(1, -1, 1) < input_lengths.view(n, 1, 1)
        states = torch.arange(log_alpha.size(2)).view(1, 1, -1) < (2 * target_lengths + 1).view(n, 1, 1)
        log_alpha = log_alpha.masked_fill(~(steps & states).to(log_alpha.device), float("-inf"))
        grad = _rand((n,), g, device).add_(0.5)
        if overload == "Tensor":
            lengths = (input_lengths.to(device), target_lengths.to(device))
        else:
            lengths = (input_lengths.tolist(), target_lengths.tolist())
        args = (grad, log_probs, targets) + lengths + (nll, log_alpha, 0, False)
        return Call(args, {}, min_bytes=2 * log_probs.numel() * ES + log_alpha.numel() * ES + targets.numel() * 8)

    return build


register("aten::_ctc_loss_backward", "speech", "T=500, N=32, C=30, S=100")(_ctc("default"))
register("aten::_ctc_loss_backward.Tensor", "speech", "T=500, N=32, C=30, S=100")(_ctc("Tensor"))


# ---------------------------------------------------------------------------------------------------
# EmbeddingBag dense backward: a recommender table of 1M rows x 64, 4,096 bags of 32 indices.

def _embedding_bag(mode: int) -> Builder:
    def build(device, g, full: bool) -> Call:
        rows, dim, bags, per_bag = (1 << 20, 64, 4096, 32) if full else (1 << 12, 16, 64, 8)
        weight = _randn((rows, dim), g, device)
        # Skewed popularity, as in recommenders: many bags share the hot rows.
        indices = (_rand((bags * per_bag,), g, device).pow(4) * rows).long().clamp_(max=rows - 1)
        offsets = torch.arange(0, bags * per_bag, per_bag).to(device)
        _, offset2bag, bag_size, maximum_indices = torch.ops.aten._embedding_bag(
            weight, indices, offsets, False, mode, False, None, False, -1)
        # NB: the CPU forward's fast path for mode=sum leaves offset2bag unfilled; build it as CUDA does.
        offset2bag = torch.arange(bags, device=device).repeat_interleave(per_bag)
        grad = _randn((bags, dim), g, device)
        args = (grad, indices, offset2bag, bag_size, maximum_indices, rows, False, mode, None, -1)
        return Call(args, {}, min_bytes=grad.numel() * ES + indices.numel() * 8 + rows * dim * ES)

    return build


register("aten::_embedding_bag_dense_backward", "recsys_sum", "1M x 64 table, 4,096 bags x 32, mode=sum")(
    _embedding_bag(0))
register("aten::_embedding_bag_dense_backward", "recsys_max", "1M x 64 table, 4,096 bags x 32, mode=max")(
    _embedding_bag(2))


# ---------------------------------------------------------------------------------------------------
# Wave 2: histc, put_, index_copy. NB: the small (CPU) shapes of the last-writer ops stay under 32,768
# elements, where stock's CPU kernels run serially and so also keep the last writer: the report compares.

def _histc_builder(kind: str, n_full: int, n_small: int, bins: int) -> Builder:
    def build(device, g, full: bool) -> Call:
        n = n_full if full else n_small
        values = _randn((n,), g, device)
        kwargs = {"bins": bins, "min": -3.0, "max": 3.0}
        if kind == "out":
            kwargs["out"] = torch.empty(bins, dtype=torch.float32, device=device)
        return Call((values,), kwargs, min_bytes=n * ES + bins * ES)

    return build


for _suffix, _kind in (("", "functional"), (".out", "out")):
    register(f"aten::histc{_suffix}", "low_contention", "4M values into 1M bins")(
        _histc_builder(_kind, 1 << 22, 1 << 14, 1 << 20))
    register(f"aten::histc{_suffix}", "high_contention", "4M values into 1,000 bins")(
        _histc_builder(_kind, 1 << 22, 1 << 14, 1000))
    register(f"aten::histc{_suffix}", "hot_destination", "4M values into one bin")(
        _histc_builder(_kind, 1 << 22, 1 << 14, 1))


def _put_builder(n_full: int, n_small: int, dests_full: int, dests_small: int, accumulate: bool) -> Builder:
    def build(device, g, full: bool) -> Call:
        n, dests = (n_full, dests_full) if full else (n_small, dests_small)
        self_ = _randn((dests,), g, device)
        index = _randint(dests, (n,), g, device)
        source = _randn((n,), g, device)
        touched = _touched(index)
        return Call((self_, index, source, accumulate), {}, min_bytes=n * ES + n * 8 + 2 * touched * ES)

    return build


register("aten::put_", "low_contention", "accumulate=True, 4M values into 4M destinations")(
    _put_builder(1 << 22, 1 << 14, 1 << 22, 1 << 14, True))
register("aten::put_", "high_contention", "accumulate=True, 4M values into 1,000 destinations")(
    _put_builder(1 << 22, 1 << 14, 1000, 100, True))
register("aten::put_", "hot_destination", "accumulate=True, 1M values into one destination")(
    _put_builder(1 << 20, 1 << 14, 1, 1, True))
register("aten::put_", "last_writer", "accumulate=False, 4M values into 1,000 destinations")(
    _put_builder(1 << 22, 1 << 14, 1000, 100, False))

# index_copy: the index_add shapes on a GPU (M, N, D); small ones under 32,768 source elements.
_INDEX_COPY_SMALL = {"low_contention": (1 << 11, 1 << 11, 8), "high_contention": (100, 1 << 12, 4),
                     "hot_destination": (1, 1 << 14, 1), "wide_rows": (1 << 12, 64, 256)}


def _index_copy_builder(kind: str, dims_full, dims_small) -> Builder:
    def build(device, g, full: bool) -> Call:
        m, n, d = dims_full if full else dims_small
        self_ = _randn((m, d), g, device)
        index = _randint(m, (n,), g, device)
        source = _randn((n, d), g, device)
        args, kwargs = _finish(kind, (self_, 0, index, source), {}, self_)
        touched = _touched(index) if kind == "inplace" else m
        return Call(args, kwargs, min_bytes=n * 8 + touched * d * ES + (touched if kind == "inplace" else m) * d * ES)

    return build


for _suffix, _kind in _KINDS.items():
    for _shape, (_full, _small, _what) in _INDEX_ADD_SHAPES.items():
        register(f"aten::index_copy{_suffix}", _shape, _what.replace("added", "copied"))(
            _index_copy_builder(_kind, _full, _INDEX_COPY_SMALL[_shape]))


# ---------------------------------------------------------------------------------------------------
# Wave 2: scatter_reduce.two on the scatter_add shapes, index_reduce on the index_add shapes, one reduction per
# shape. NB: prod's values lie within 1e-3 of 1, so a product of a million stays finite and non-zero.

def _reduce_values(shape, g, device, reduce: str) -> torch.Tensor:
    if reduce == "prod":
        return (1 + (_rand(shape, g, "cpu") - 0.5) * 1e-3).to(device)
    return _randn(shape, g, device)


def _scatter_reduce_builder(kind: str, reduce: str, include_self: bool, full_dims, small_dims,
                            expand: bool) -> Builder:
    def build(device, g, full: bool) -> Call:
        self_shape, src_shape, high = full_dims if full else small_dims
        self_ = _reduce_values(self_shape, g, device, reduce)
        if expand:
            index = _randint(high, (src_shape[0], 1), g, device).expand(src_shape)
        else:
            index = _randint(high, src_shape, g, device)
        src = _reduce_values(src_shape, g, device, reduce)
        args, kwargs = _finish(kind, (self_, 0, index, src, reduce), {"include_self": include_self}, self_)
        index_bytes = (src_shape[0] if expand else src.numel()) * 8
        return Call(args, kwargs, min_bytes=src.numel() * ES + index_bytes + 2 * self_.numel() * ES)

    return build


def _index_reduce_builder(kind: str, reduce: str, include_self: bool, dims_full, dims_small) -> Builder:
    def build(device, g, full: bool) -> Call:
        m, n, d = dims_full if full else dims_small
        self_ = _reduce_values((m, d), g, device, reduce)
        index = _randint(m, (n,), g, device)
        source = _reduce_values((n, d), g, device, reduce)
        args, kwargs = _finish(kind, (self_, 0, index, source, reduce), {"include_self": include_self}, self_)
        return Call(args, kwargs, min_bytes=n * d * ES + n * 8 + 2 * m * d * ES)

    return build


_SCATTER_REDUCE_OF_SHAPE = {"low_contention": ("prod", True), "high_contention": ("mean", True),
                            "hot_destination": ("sum", False), "message_passing": ("amax", False)}
_INDEX_REDUCE_OF_SHAPE = {"low_contention": ("mean", True), "high_contention": ("amax", True),
                          "hot_destination": ("prod", False), "wide_rows": ("amin", False)}

for _suffix, _kind in ((".two", "functional"), ("_.two", "inplace"), (".two_out", "out")):
    for _shape, (_full, _small, _what) in _SCATTER_ADD_SHAPES.items():
        _reduce, _include = _SCATTER_REDUCE_OF_SHAPE[_shape]
        register(f"aten::scatter_reduce{_suffix}", _shape, f"{_what}; reduce={_reduce}, include_self={_include}")(
            _scatter_reduce_builder(_kind, _reduce, _include, _full, _small, _shape == "message_passing"))
for _suffix, _kind in _KINDS.items():
    for _shape, (_full, _small, _what) in _INDEX_ADD_SHAPES.items():
        _reduce, _include = _INDEX_REDUCE_OF_SHAPE[_shape]
        register(f"aten::index_reduce{_suffix}", _shape,
                 f"{_what.replace('added', 'reduced')}; reduce={_reduce}, include_self={_include}")(
            _index_reduce_builder(_kind, _reduce, _include, _full, _small))


# scatter_reduce_.two with sum, mean and prod on every scatter_add shape (include_self=True).
for _shape, (_full, _small, _what) in _SCATTER_ADD_SHAPES.items():
    for _reduce in ("sum", "mean", "prod"):
        register("aten::scatter_reduce_.two", f"{_shape}_{_reduce}", f"{_what}; reduce={_reduce}")(
            _scatter_reduce_builder("inplace", _reduce, True, _full, _small, _shape == "message_passing"))


# ---------------------------------------------------------------------------------------------------
# Wave 3: scatter (src, value, reduce, value_reduce) on the scatter_add shapes; _index_put_impl_ (what
# index_put_ and x[idx] += v dispatch to) on the index_add shapes: self [M, D], indices [index [N]],
# values [N, D].

def _scatter_builder(kind: str, overload: str, reduce: Optional[str], full_dims, small_dims,
                     expand: bool) -> Builder:
    def build(device, g, full: bool) -> Call:
        self_shape, src_shape, high = full_dims if full else small_dims
        values = "prod" if reduce == "multiply" else "sum"
        self_ = _reduce_values(self_shape, g, device, values)
        if expand:
            index = _randint(high, (src_shape[0], 1), g, device).expand(src_shape)
        else:
            index = _randint(high, src_shape, g, device)
        src = _reduce_values(src_shape, g, device, values)
        value = 1.0005 if reduce == "multiply" else 0.5
        args = (self_, 0, index, src if overload in ("src", "reduce") else value)
        args, kwargs = _finish(kind, args, {} if reduce is None else {"reduce": reduce}, self_)
        index_bytes = (src_shape[0] if expand else src.numel()) * 8
        reads = src.numel() * ES if overload in ("src", "reduce") else 0
        return Call(args, kwargs, min_bytes=reads + index_bytes + (2 if reduce else 1) * self_.numel() * ES)

    return build


_SCATTER_REDUCE_OF_SCATTER_SHAPE = {"low_contention": "multiply", "high_contention": "add",
                                    "hot_destination": "add", "message_passing": "multiply"}

for _suffix, _kind in ((".", "functional"), ("_.", "inplace")):
    for _overload in ("src", "value", "reduce", "value_reduce"):
        for _shape, (_full, _small, _what) in _SCATTER_ADD_SHAPES.items():
            _reduce = _SCATTER_REDUCE_OF_SCATTER_SHAPE[_shape] if "reduce" in _overload else None
            register(f"aten::scatter{_suffix}{_overload}", _shape, _what + (f"; reduce={_reduce}" if _reduce else ""))(
                _scatter_builder(_kind, _overload, _reduce, _full, _small, _shape == "message_passing"))
for _overload in ("src", "value", "reduce", "value_reduce"):
    for _shape, (_full, _small, _what) in _SCATTER_ADD_SHAPES.items():
        _reduce = _SCATTER_REDUCE_OF_SCATTER_SHAPE[_shape] if "reduce" in _overload else None
        register(f"aten::scatter.{_overload}_out", _shape, _what + (f"; reduce={_reduce}" if _reduce else ""))(
            _scatter_builder("out", _overload, _reduce, _full, _small, _shape == "message_passing"))


def _index_put_builder(accumulate: bool, dims_full, dims_small) -> Builder:
    def build(device, g, full: bool) -> Call:
        m, n, d = dims_full if full else dims_small
        self_ = _randn((m, d), g, device)
        index = _randint(m, (n,), g, device)
        values = _randn((n, d), g, device)
        touched = _touched(index)
        return Call((self_, [index], values, accumulate), {},
                    min_bytes=n * d * ES + n * 8 + (2 if accumulate else 1) * touched * d * ES)

    return build


for _shape, (_full, _small, _what) in _INDEX_ADD_SHAPES.items():
    register("aten::_index_put_impl_", _shape, _what + "; accumulate=True")(
        _index_put_builder(True, _full, _small))
register("aten::_index_put_impl_", "last_writer", "1,000 destinations, 16 floats per row; accumulate=False")(
    _index_put_builder(False, *_INDEX_ADD_SHAPES["high_contention"][:2]))


# ---------------------------------------------------------------------------------------------------
# Padding backwards (model shapes): grad_output [..., padded] -> grad_input [...], padding as in aten (last
# dimension first).

def _pad(kind: str, full_shape, full_padding, small_shape, small_padding) -> Builder:
    def build(device, g, full: bool) -> Call:
        shape, padding = (full_shape, full_padding) if full else (small_shape, small_padding)
        self_ = _randn(shape, g, device)
        out_shape = list(shape)
        for a in range(len(padding) // 2):
            out_shape[-1 - a] += padding[2 * a] + padding[2 * a + 1]
        return _pool_call(kind, _randn(out_shape, g, device), self_, (list(padding),))

    return build


_PAD_CASES = [
    # (aten name, shape name, words, full shape, full padding, small shape, small padding)
    ("reflection_pad1d_backward", "stft_center", "audio STFT centre padding: 32 x 160k samples, n_fft 512",
     (32, 1, 160_000), (256, 256), (2, 1, 4000), (64, 64)),
    ("reflection_pad1d_backward", "conv1d", "1-D conv padding: 64x256x1024, pad 3",
     (64, 256, 1024), (3, 3), (2, 16, 128), (3, 3)),
    ("reflection_pad2d_backward", "resnet_block", "CycleGAN residual block: 16x256x64x64, pad 1",
     (16, 256, 64, 64), (1, 1, 1, 1), (2, 8, 16, 16), (1, 1, 1, 1)),
    ("reflection_pad3d_backward", "video", "3-D conv padding: 4x64x16x56x56, pad 1",
     (4, 64, 16, 56, 56), (1,) * 6, (1, 4, 4, 8, 8), (1,) * 6),
    ("replication_pad1d_backward", "conv1d", "1-D conv padding: 64x256x1024, pad 2",
     (64, 256, 1024), (2, 2), (2, 16, 128), (2, 2)),
    ("replication_pad2d_backward", "conv_block", "2-D conv padding: 16x64x128x128, pad 1",
     (16, 64, 128, 128), (1, 1, 1, 1), (2, 4, 16, 16), (1, 1, 1, 1)),
    ("replication_pad2d_backward", "wide_border", "8x16x64x64, pad 32: corners collect 33x33 contributions",
     (8, 16, 64, 64), (32,) * 4, (1, 4, 8, 8), (8,) * 4),
    ("replication_pad3d_backward", "video", "3-D conv padding: 4x64x16x56x56, pad 1",
     (4, 64, 16, 56, 56), (1,) * 6, (1, 4, 4, 8, 8), (1,) * 6),
]

for _suffix, _kind in (("", "functional"), (".grad_input", "out")):
    for _name, _shape, _what, _full_shape, _full_pad, _small_shape, _small_pad in _PAD_CASES:
        register(f"aten::{_name}{_suffix}", _shape, _what)(
            _pad(_kind, _full_shape, _full_pad, _small_shape, _small_pad))


# ---------------------------------------------------------------------------------------------------
# Upsample backwards, linear family (model shapes): grad_output [N, C, out...] -> grad_input [N, C, in...],
# align_corners False, scales from the sizes.

def _upsample(kind: str, full_in, full_out, small_in, small_out, channels_last: bool = False) -> Builder:
    def build(device, g, full: bool) -> Call:
        in_shape, out_spatial = (full_in, full_out) if full else (small_in, small_out)
        grad_output = _randn(tuple(in_shape[:2]) + tuple(out_spatial), g, device)
        if channels_last:
            grad_output = grad_output.contiguous(memory_format=torch.channels_last)
        args = (grad_output, list(out_spatial), list(in_shape), False)
        kwargs = {}
        if kind == "out":
            kwargs = {"grad_input": torch.empty(in_shape, device=device)}
        return Call(args, kwargs, min_bytes=grad_output.numel() * ES + math.prod(in_shape) * ES)

    return build


_UPSAMPLE_CASES = [
    # (aten name, shape name, words, full input shape, full output size, small input, small output, NHWC)
    ("upsample_linear1d_backward", "audio_x4", "1-D decoder upsampling x4: 32x256x4000 -> 16000",
     (32, 256, 4000), (16000,), (2, 8, 100), (400,), False),
    ("upsample_bilinear2d_backward", "fpn_x2", "FPN top-down x2: 16x256x64x64 -> 128x128",
     (16, 256, 64, 64), (128, 128), (2, 8, 16, 16), (32, 32), False),
    ("upsample_bilinear2d_backward", "segmentation_x8", "segmentation head x8 logits: 16x21x64x64 -> 512x512",
     (16, 21, 64, 64), (512, 512), (2, 5, 8, 8), (64, 64), False),
    ("upsample_bilinear2d_backward", "fpn_x2_nhwc", "FPN top-down x2, channels-last: 16x256x64x64 -> 128x128",
     (16, 256, 64, 64), (128, 128), (2, 8, 16, 16), (32, 32), True),
    ("upsample_bicubic2d_backward", "super_resolution_x4", "super-resolution x4: 16x64x64x64 -> 256x256",
     (16, 64, 64, 64), (256, 256), (2, 4, 16, 16), (64, 64), False),
    ("upsample_trilinear3d_backward", "unet3d_x2", "3-D U-Net decoder x2: 2x64x32x32x32 -> 64x64x64",
     (2, 64, 32, 32, 32), (64, 64, 64), (1, 4, 4, 8, 8), (8, 16, 16), False),
]

for _suffix, _kind in (("", "functional"), (".grad_input", "out")):
    for _name, _shape, _what, _full_in, _full_out, _small_in, _small_out, _cl in _UPSAMPLE_CASES:
        register(f"aten::{_name}{_suffix}", _shape, _what)(
            _upsample(_kind, _full_in, _full_out, _small_in, _small_out, _cl))


# ---------------------------------------------------------------------------------------------------
# nll_loss2d_forward: 2-d cross-entropy of a segmentation model, mean over pixels with class weights and
# ignore_index 255 on about 5% of the pixels (VOC's border label).

def _nll_loss2d(kind: str) -> Builder:
    def build(device, g, full: bool) -> Call:
        n, c, h, w = (16, 21, 512, 512) if full else (2, 5, 16, 16)
        input_ = _randn((n, c, h, w), g, device)
        target = _randint(c, (n, h, w), g, device)
        target = target.masked_fill(_rand((n, h, w), g, device) < 0.05, 255)
        weight = _rand((c,), g, device).add_(0.5)
        kwargs = {}
        if kind == "out":
            kwargs = {"output": torch.empty((), device=device), "total_weight": torch.empty((), device=device)}
        pixels = n * h * w
        return Call((input_, target, weight, 1, 255), kwargs, min_bytes=pixels * 8 + pixels * ES + c * ES)

    return build


register("aten::nll_loss2d_forward", "segmentation", "16x21x512x512 (VOC), mean, class weights, 5% ignored")(
    _nll_loss2d("functional"))
register("aten::nll_loss2d_forward.output", "segmentation", "16x21x512x512 (VOC), mean, class weights, 5% ignored")(
    _nll_loss2d("out"))


# ---------------------------------------------------------------------------------------------------
# Antialiased upsample backwards: grad_output [N, C, OH, OW] -> grad_input [N, C, IH, IW], as
# F.interpolate(..., antialias=True) (torchvision's Resize) calls them.

def _upsample_aa(kind: str, full, small) -> Builder:
    def build(device, g, full_shape: bool) -> Call:
        (n, c, ih, iw), (oh, ow) = full if full_shape else small
        grad_output = _randn((n, c, oh, ow), g, device)
        like = torch.empty((n, c, ih, iw), device=device)
        args, kwargs = _finish(kind, (grad_output, [oh, ow], [n, c, ih, iw], False, None, None), {}, like,
                               "grad_input")
        return Call(args, kwargs, min_bytes=(grad_output.numel() + like.numel()) * ES)

    return build


_UPSAMPLE_AA_CASES = [
    # (shape name, words, full (input size, output size), small (input size, output size))
    ("resize_224", "image resize 32x3x512x512 -> 224x224 (torchvision Resize, antialias)",
     ((32, 3, 512, 512), (224, 224)), ((2, 3, 64, 64), (28, 28))),
    ("downsample_8x", "feature maps 8x64x256x256 -> 32x32: windows of 16 (bilinear) / 32 (bicubic) inputs",
     ((8, 64, 256, 256), (32, 32)), ((1, 4, 64, 64), (8, 8))),
    ("upsample_4x", "8x64x64x64 -> 256x256: each input collects 8x8 (bilinear) / 16x16 (bicubic) outputs",
     ((8, 64, 64, 64), (256, 256)), ((1, 4, 8, 8), (32, 32))),
]

for _mode in ("bilinear", "bicubic"):
    for _suffix, _kind in (("", "functional"), (".grad_input", "out")):
        for _shape, _what, _full, _small in _UPSAMPLE_AA_CASES:
            register(f"aten::_upsample_{_mode}2d_aa_backward{_suffix}", _shape, _what)(
                _upsample_aa(_kind, _full, _small))


# ---------------------------------------------------------------------------------------------------
# Grid sampler backwards: a spatial transformer's sampling grid (a random affine map near the identity, some
# points outside the input) over a feature map; grad_output [N, C, grid sizes].

def _affine_grid(n: int, size, g, device) -> torch.Tensor:
    dims = len(size) - 2
    eye = torch.eye(dims, dims + 1).expand(n, dims, dims + 1)
    theta = eye + 0.2 * _randn((n, dims, dims + 1), g, "cpu")
    return torch.nn.functional.affine_grid(theta, list(size), align_corners=False).to(device)


def _grid_sampler(kind: str, full_in, small_in, full_out, small_out, interpolation: int, padding: int,
                  align_corners: bool) -> Builder:
    def build(device, g, full: bool) -> Call:
        in_shape, out_shape = (full_in, full_out) if full else (small_in, small_out)
        n, c = in_shape[:2]
        input_ = _randn(in_shape, g, device)
        grid = _affine_grid(n, (n, c) + tuple(out_shape), g, device)
        grad_output = _randn((n, c) + tuple(out_shape), g, device)
        # grid and grad_grid, grad_output, the input once and grad_input once
        min_bytes = 2 * grid.numel() * ES + grad_output.numel() * ES + 2 * input_.numel() * ES
        if kind == "cudnn":
            return Call((input_, grid, grad_output), {}, min_bytes=min_bytes)
        args = (grad_output, input_, grid, interpolation, padding, align_corners, [True, True])
        return Call(args, {}, min_bytes=min_bytes)

    return build


def _cudnn_reference(self, grid, grad_output):
    """cuDNN's sampler backward is the native 2-d backward with bilinear, zeros, align_corners=True."""
    return torch.ops.aten.grid_sampler_2d_backward(grad_output, self, grid, 0, 0, True, [True, True])


register("aten::grid_sampler_2d_backward", "spatial_transformer",
         "STN: 32x64x64x64 input, 64x64 affine grid, bilinear, zeros")(
    _grid_sampler("native", (32, 64, 64, 64), (2, 3, 8, 9), (64, 64), (6, 7), 0, 0, False))
register("aten::grid_sampler_2d_backward", "bicubic_reflection",
         "warp: 16x32x64x64 input, 64x64 affine grid, bicubic, reflection")(
    _grid_sampler("native", (16, 32, 64, 64), (2, 3, 8, 9), (64, 64), (6, 7), 2, 2, False))
register("aten::grid_sampler_3d_backward", "volume",
         "3-D STN: 4x16x32x32x32 volume, 32^3 affine grid, trilinear, border")(
    _grid_sampler("native", (4, 16, 32, 32, 32), (1, 2, 4, 5, 6), (32, 32, 32), (3, 4, 5), 0, 1, False))
register("aten::cudnn_grid_sampler_backward", "spatial_transformer",
         "STN on the cuDNN route: 32x64x64x64 input, 64x64 affine grid (bilinear, zeros, align_corners)",
         stock_cpu=_cudnn_reference)(
    _grid_sampler("cudnn", (32, 64, 64, 64), (2, 3, 8, 9), (64, 64), (6, 7), 0, 0, True))


# ---------------------------------------------------------------------------------------------------
# median / nanmedian along a dim: rows of a feature map (a median filter's windows, unfolded) and a few long
# rows; about 1% NaN for nanmedian.

def _median_builder(nan: bool, rows_full: int, n_full: int, rows_small: int, n_small: int) -> Builder:
    def build(device, g, full: bool) -> Call:
        rows, n = (rows_full, n_full) if full else (rows_small, n_small)
        self_ = _randn((rows, n), g, device)
        if nan:
            self_ = self_.masked_fill(_rand((rows, n), g, device) < 0.01, float("nan"))
        kwargs = {"values": torch.empty(rows, device=device),
                  "indices": torch.empty(rows, dtype=torch.long, device=device)}
        return Call((self_, 1, False), kwargs, min_bytes=rows * n * ES + rows * (ES + 8))

    return build


for _name, _nan in (("median", False), ("nanmedian", True)):
    register(f"aten::{_name}.dim_values", "median_filter", "4M windows of 3x3 (rows of 9)")(
        _median_builder(_nan, 1 << 22, 9, 1 << 10, 9))
    register(f"aten::{_name}.dim_values", "long_rows", "64 rows of 64K")(
        _median_builder(_nan, 64, 1 << 16, 4, 1 << 10))


# ---------------------------------------------------------------------------------------------------
# max_unpool2d / max_unpool3d: a SegNet decoder's unpooling (indices of a 2x2 / 2x2x2 stride-2 max pool), and
# an overlapping pool (3x3, stride 1), whose indices repeat: several input elements write one output element.

def _max_unpool_builder(kind: str, dims: int, full_shape, small_shape, kernel: int, stride: int) -> Builder:
    def build(device, g, full: bool) -> Call:
        shape = full_shape if full else small_shape
        x = _randn(shape, g, device)
        pool = torch.nn.functional.max_pool2d if dims == 2 else torch.nn.functional.max_pool3d
        values, indices = pool(x, kernel, stride, return_indices=True)
        output_size = list(shape[-dims:])
        args = (values, indices, output_size) if dims == 2 else (values, indices, output_size, [stride] * 3, [0] * 3)
        kwargs = {"out": torch.empty_like(x)} if kind == "out" else {}
        return Call(args, kwargs, min_bytes=values.numel() * (ES + 8) + x.numel() * ES)

    return build


for _suffix, _kind in (("", "functional"), (".out", "out")):
    register(f"aten::max_unpool2d{_suffix}", "segnet", "16x64x224x224 output, 2x2 stride-2 pool indices")(
        _max_unpool_builder(_kind, 2, (16, 64, 224, 224), (2, 4, 16, 16), 2, 2))
    register(f"aten::max_unpool2d{_suffix}", "overlapping", "16x64x112x112 output, 3x3 stride-1 pool indices")(
        _max_unpool_builder(_kind, 2, (16, 64, 112, 112), (2, 4, 16, 16), 3, 1))
    register(f"aten::max_unpool3d{_suffix}", "segnet3d", "4x32x32x112x112 output, 2x2x2 stride-2 pool indices")(
        _max_unpool_builder(_kind, 3, (4, 32, 32, 112, 112), (2, 3, 4, 8, 8), 2, 2))
