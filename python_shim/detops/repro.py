"""The whole reproducibility recipe in one call, and seeded DataLoader workers.

PyTorch's reproducibility notes list the sources of run-to-run differences besides nondeterministic kernels:
unseeded RNGs (torch on every device, Python ``random``, NumPy), cuDNN benchmarking and nondeterministic
cuDNN algorithms, the cuBLAS workspace (``CUBLAS_WORKSPACE_CONFIG``, read when cuBLAS sets up its
workspaces), and DataLoader workers (each needs its own seed from a seeded generator). Stock CPU kernels
(convolution, matmul) also change bits with the intra-op thread count and the CPU's instruction set.
:func:`enable_determinism` handles each of them it can, records the thread count (and pins it on request)
and returns what it changed.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import random
import warnings
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.utils.deterministic

CUBLAS_VARIABLE = "CUBLAS_WORKSPACE_CONFIG"
CUBLAS_DEFAULT = ":4096:8"
# The values torch accepts as deterministic (Context::checkCuBLASConfigDeterministic).
CUBLAS_DETERMINISTIC = (":4096:8", ":16:8")
# The DeterminismRecord entry of the intra-op thread count.
THREADS = "intra-op threads"

try:
    import numpy as _np
except ImportError:  # pragma: no cover - numpy is optional
    _np = None

# What the last enable_determinism() did, for detops.doctor().
_state: Dict[str, Any] = {}
# torch's seed when detops was imported (random unless torch was seeded before): a different seed later
# means torch was seeded explicitly.
_startup_seed: int = torch.initial_seed()


@dataclasses.dataclass
class DeterminismRecord:
    """What :func:`enable_determinism` found and set. ``changed`` maps each setting it changed to
    ``(before, after)``; ``unchanged`` holds those already as required; ``warnings`` what it warned about."""

    seed: int
    changed: Dict[str, Tuple[Any, Any]] = dataclasses.field(default_factory=dict)
    unchanged: Dict[str, Any] = dataclasses.field(default_factory=dict)
    warnings: List[str] = dataclasses.field(default_factory=list)
    # torch.get_num_threads() after the call (pinned when enable_determinism(num_threads=...) was given).
    num_threads: Optional[int] = None

    def _set(self, name: str, before: Any, after: Any) -> None:
        if before == after:
            self.unchanged[name] = after
        else:
            self.changed[name] = (before, after)

    def __str__(self) -> str:
        lines = [f"detops.enable_determinism(seed={self.seed}):"]
        lines += [f"  set {name}: {before!r} -> {after!r}" for name, (before, after) in self.changed.items()]
        lines += [f"  kept {name} = {value!r}" for name, value in self.unchanged.items()]
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


def _numpy_seed(seed: int) -> int:
    return seed % 2**32  # numpy's legacy global RNG takes a 32-bit seed


def _check_positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"detops.enable_determinism(): {name} must be a positive int, got {value!r}")


def enable_determinism(seed: int, *, warn_only: bool = False,
                       num_threads: Optional[int] = None) -> DeterminismRecord:
    """Applies the whole reproducibility recipe for this process:

    * seeds torch (CPU and every CUDA device; CUDA lazily, without initialising it), Python ``random`` and
      NumPy's global RNG (``seed % 2**32``);
    * ``torch.use_deterministic_algorithms(True, warn_only=warn_only)``;
    * ``torch.backends.cudnn.deterministic = True`` and ``torch.backends.cudnn.benchmark = False``;
    * ``torch.utils.deterministic.fill_uninitialized_memory = True`` (the default: under the flag, memory from
      ``torch.empty`` and friends is filled, so reading it is reproducible);
    * ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` if unset; warns if CUDA is already initialised (cuBLAS may have
      set up its workspaces before the variable existed) or if it holds a nondeterministic value;
    * loads ``libdetops.so`` (if needed) and turns its overrides on if they were off;
    * records the intra-op thread count (``torch.get_num_threads()``), and with ``num_threads=N`` pins it
      (``torch.set_num_threads(N)``): stock CPU kernels such as convolution and matmul may split a sum
      among threads, so their bits can change with the count (detops' own ops do not). Pin it to compare CPU runs
      across machines with different core counts; the CPU's instruction set still matters
      (``detops.doctor()`` reports it).

    NumPy ``Generator`` objects (``np.random.default_rng()``) are not global: create them with a seed.
    For DataLoader workers use :func:`dataloader_kwargs`. Returns a :class:`DeterminismRecord`.
    """
    import detops

    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"detops.enable_determinism(): seed must be a non-negative int, got {seed!r}")
    if num_threads is not None:
        _check_positive_int("num_threads", num_threads)
    record = DeterminismRecord(seed=seed)

    detops.load_library()
    mode = detops.get_mode()
    if mode == "off":
        detops.set_mode("auto")
    record._set("detops mode", mode, detops.get_mode())

    cuda_was_initialized = torch.cuda.is_initialized()
    cublas = os.environ.get(CUBLAS_VARIABLE)
    if cublas is None:
        os.environ[CUBLAS_VARIABLE] = CUBLAS_DEFAULT
        if cuda_was_initialized:
            message = (
                f"detops.enable_determinism(): CUDA was already initialised when {CUBLAS_VARIABLE} was set to "
                f"{CUBLAS_DEFAULT!r}; cuBLAS handles and workspaces created before now may not follow it. "
                f"Set {CUBLAS_VARIABLE}={CUBLAS_DEFAULT} in the environment before starting Python, or call "
                f"enable_determinism() before the first CUDA operation."
            )
            warnings.warn(message, RuntimeWarning, stacklevel=2)
            record.warnings.append(message)
    elif cublas not in CUBLAS_DETERMINISTIC:
        message = (
            f"detops.enable_determinism(): {CUBLAS_VARIABLE}={cublas!r} is not one of the deterministic "
            f"settings {CUBLAS_DETERMINISTIC}; cuBLAS matmuls will raise under the flag. Left as it is."
        )
        warnings.warn(message, RuntimeWarning, stacklevel=2)
        record.warnings.append(message)
    record._set(CUBLAS_VARIABLE, cublas, os.environ[CUBLAS_VARIABLE])

    before = torch.initial_seed()
    torch.manual_seed(seed)  # CPU and all CUDA devices (queued until CUDA initialises)
    record._set("torch.manual_seed", before, torch.initial_seed())
    random.seed(seed)
    record._set("random.seed", None, seed)
    if _np is not None:
        _np.random.seed(_numpy_seed(seed))
        record._set("numpy.random.seed", None, _numpy_seed(seed))

    flag = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    torch.use_deterministic_algorithms(True, warn_only=warn_only)
    record._set("torch.use_deterministic_algorithms", flag, (True, warn_only))
    deterministic = torch.backends.cudnn.deterministic
    torch.backends.cudnn.deterministic = True
    record._set("torch.backends.cudnn.deterministic", deterministic, True)
    benchmark = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = False
    record._set("torch.backends.cudnn.benchmark", benchmark, False)
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.utils.deterministic.fill_uninitialized_memory = True  # torch.empty & co. filled under the flag
    record._set("torch.utils.deterministic.fill_uninitialized_memory", fill, True)

    threads = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    record._set(THREADS, threads, torch.get_num_threads())
    record.num_threads = torch.get_num_threads()

    _state.clear()
    _state.update(seed=seed, torch_seed=torch.initial_seed(), numpy_seed=_numpy_seed(seed),
                  cuda_was_initialized=cuda_was_initialized, cublas_set_by_detops=cublas is None,
                  num_threads=record.num_threads, num_threads_pinned=num_threads is not None,
                  warnings=list(record.warnings))
    return record


def seed_worker(worker_id: int) -> None:
    """``worker_init_fn`` for a DataLoader: seeds Python ``random`` and NumPy in each worker from the
    worker's torch seed (which the DataLoader derives from its ``generator``)."""
    worker_seed = torch.initial_seed() % 2**32
    random.seed(worker_seed)
    if _np is not None:
        _np.random.seed(worker_seed)


def dataloader_kwargs(seed: int, generator: Optional[torch.Generator] = None) -> Dict[str, Any]:
    """``DataLoader(dataset, ..., **detops.dataloader_kwargs(seed))``: ``worker_init_fn`` and a seeded
    ``generator`` (shuffling, sampling and the per-worker seeds follow it)."""
    generator = generator if generator is not None else torch.Generator()
    generator.manual_seed(seed)
    return {"worker_init_fn": seed_worker, "generator": generator}


def last_enable_determinism() -> Dict[str, Any]:
    """What the last :func:`enable_determinism` in this process recorded ({} if never called)."""
    return dict(_state)


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux; with family/model/stepping when the name alone is
    vague, as in many virtual machines), else what :mod:`platform` knows."""
    fields: Dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block is enough
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name") or fields.get("Model") or platform.processor() or platform.machine()
    ids = [f"{key} {fields[key]}" for key in ("cpu family", "model", "stepping") if key in fields]
    return f"{name} ({', '.join(ids)})" if ids else name


def machine_summary() -> str:
    """One line naming what stock CPU kernels' bits depend on: the CPU model, its logical CPU count, the
    intra-op thread count and the CPU capability ATen dispatches on. Print it next to a checksum."""
    threads = torch.get_num_threads()
    return (f"{cpu_model()}, {os.cpu_count()} logical CPUs, {threads} intra-op thread{'s' if threads != 1 else ''}, "
            f"CPU capability {torch.backends.cpu.get_cpu_capability()}")
