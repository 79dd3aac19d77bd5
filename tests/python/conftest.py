"""Shared fixtures: detops loaded from $DETOPS_LIBRARY (set by scripts/test.sh) or the build dir; the
`gpu` marker skips cleanly without a CUDA device; every test leaves the mode, padding, upsample and compile
routing, strict flag, deterministic flag and thread count as it found them."""

import pytest
import torch

import detops

HAS_CUDA = torch.cuda.is_available()

FLOAT_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="no CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _restore_global_state():
    # Importing torch.testing._internal (for OpInfo samples) freezes the cuDNN flags process-wide
    # (torch.backends.disable_global_flags); the reproducibility tests set them, as users do.
    torch.backends.flags_frozen.__globals__["__allow_nonbracketed_mutation_flag"] = True
    mode, strict, routed = detops.get_mode(), detops.get_strict(), detops.padding_routed()
    compile_routed, upsampled = detops.compile_routed(), detops.upsample_routed()
    flag, warn_only = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    threads = torch.get_num_threads()
    yield
    detops.set_mode(mode)
    detops.route_padding(routed)
    detops.route_upsample(upsampled)
    detops.route_compile(compile_routed)
    detops.set_strict(strict)
    torch.use_deterministic_algorithms(flag, warn_only=warn_only)
    torch.set_num_threads(threads)


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's raw bits, for bitwise comparisons (NaN-safe)."""
    t = t.detach().contiguous().cpu()
    if t.element_size() == 16:  # complex128: its two float64 halves
        t = torch.view_as_real(t)
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def assert_bitwise_equal(a: torch.Tensor, b: torch.Tensor, msg: str = "") -> None:
    assert a.shape == b.shape and a.dtype == b.dtype, f"{msg}: {a.shape}/{a.dtype} vs {b.shape}/{b.dtype}"
    assert torch.equal(bits(a), bits(b)), f"{msg}: not bitwise identical"


def assert_as_accurate_as_stock(got: torch.Tensor, stock: torch.Tensor, ref: torch.Tensor, floor: float,
                                msg: str = "") -> None:
    """``got`` is finite wherever the float64 reference ``ref`` is, and its error ||got - ref|| / ||ref|| is at
    most twice stock's (over the elements where stock is finite) or at most ``floor``. For stock kernels whose
    own rounding (half-precision atomics, long float recursions) or non-finite results rule out a fixed
    tolerance against stock."""
    got, stock, ref = (t.detach().cpu().double() for t in (got, stock, ref))
    assert got.shape == stock.shape == ref.shape, f"{msg}: {got.shape} / {stock.shape} / {ref.shape}"
    finite = ref.isfinite()
    assert bool(got[finite].isfinite().all()), f"{msg}: non-finite where the float64 reference is finite"
    norm = max(float(ref[finite].norm()), 1e-300)
    err = float((got - ref)[finite].norm()) / norm
    both = finite & stock.isfinite()
    err_stock = float((stock - ref)[both].norm()) / norm
    assert err <= max(2 * err_stock, floor), f"{msg}: error {err:.3g} against float64, stock's {err_stock:.3g}"


def cpu_bytes_allocated(fn) -> int:
    """Bytes that ``fn()`` allocates on the CPU (every allocation counted, frees not subtracted), from the
    profiler's memory events: a .grad_input overload that computes straight into grad_input allocates less than
    grad_input's bytes."""
    import warnings

    from torch.profiler import ProfilerActivity, profile

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            fn()
        return sum(max(e.self_cpu_memory_usage, 0) for e in prof.events())


def rtol_for(dtype: torch.dtype) -> float:
    """detops accumulates in float (double for double) and rounds once: within one output ulp of float64."""
    return {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 2.0**-10, torch.bfloat16: 2.0**-7}[dtype]


def assert_close_to_f64(got: torch.Tensor, ref64: torch.Tensor, msg: str = "") -> None:
    torch.testing.assert_close(got.double(), ref64.double(), rtol=rtol_for(got.dtype), atol=1e-5, msg=msg)


def assert_twin_schemas_equal_aten(names) -> None:
    """Each twin torch.ops.detops.<name>.<overload> has aten's schema (arguments, defaults, alias annotations)."""
    for name in names:
        base, _, overload = name[len("aten::"):].partition(".")
        aten_schema = getattr(getattr(torch.ops.aten, base), overload or "default")._schema
        twin_schema = getattr(getattr(torch.ops.detops, base), overload or "default")._schema
        assert str(twin_schema).split("(", 1)[1] == str(aten_schema).split("(", 1)[1], name
