"""``detops.doctor()``: each source of irreproducibility, OK or not, for this process and environment, plus
the versions a bug report about irreproducibility needs. It never initialises CUDA.

Besides the flags and seeds it reports, as notes, what changes bits between machines and set-ups rather than
between runs: the intra-op thread count and the CPU capability (stock CPU kernels), and the distributed
settings (torch.distributed's backend and world size, the NCCL variables that change the order of an
all-reduce's sum, and a DistributedDataParallel model's buckets)."""

from __future__ import annotations

import dataclasses
import os
import platform
import shutil
import subprocess
import sys
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.utils.deterministic

from . import repro

OK = "ok"
PROBLEM = "problem"
NOTE = "note"  # cannot be checked from inside the process; says what to do


@dataclasses.dataclass
class Check:
    name: str
    status: str  # OK, PROBLEM or NOTE
    value: Any
    detail: str

    @property
    def ok(self) -> Optional[bool]:
        return None if self.status == NOTE else self.status == OK


@dataclasses.dataclass
class DoctorResult:
    checks: List[Check]
    versions: Dict[str, Optional[str]]

    @property
    def ok(self) -> bool:
        return all(c.status != PROBLEM for c in self.checks)

    @property
    def problems(self) -> List[Check]:
        return [c for c in self.checks if c.status == PROBLEM]

    def __getitem__(self, name: str) -> Check:
        for check in self.checks:
            if check.name == name:
                return check
        raise KeyError(name)

    def as_dict(self) -> Dict[str, Any]:
        return {"ok": self.ok, "versions": dict(self.versions),
                "checks": [dict(dataclasses.asdict(c), ok=c.ok) for c in self.checks]}

    def format(self) -> str:
        marks = {OK: "[ OK ]", PROBLEM: "[FAIL]", NOTE: "[note]"}
        lines = ["detops doctor: sources of irreproducibility in this process"]
        lines += [f"  {marks[c.status]} {c.name}: {c.detail}" for c in self.checks]
        lines.append("versions:")
        lines += [f"  {k}: {v if v is not None else 'n/a'}" for k, v in self.versions.items()]
        lines.append("all OK" if self.ok else
                     f"{len(self.problems)} problem(s): fix them, or call detops.enable_determinism(seed) first")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


def _check(name: str, good: bool, value: Any, ok_detail: str, problem_detail: str) -> Check:
    return Check(name, OK if good else PROBLEM, value, ok_detail if good else problem_detail)


def _seed_checks() -> List[Check]:
    state = repro.last_enable_determinism()
    seed = torch.initial_seed()
    if not state:
        why = "not seeded through detops.enable_determinism(seed) in this process"
        reseeded = seed != repro._startup_seed
        return [
            Check("torch RNG seed", OK if reseeded else PROBLEM, seed,
                  f"seeded with {seed} after import detops (not by enable_determinism)" if reseeded else
                  f"{why} (torch.initial_seed() = {seed}, as at start-up)"),
            Check("Python random seed", PROBLEM, None, why),
            Check("NumPy global RNG seed", PROBLEM if repro._np is not None else NOTE, None,
                  why if repro._np is not None else "NumPy not installed"),
        ]
    checks = [_check("torch RNG seed", seed == state["torch_seed"], seed,
                     f"seeded with {seed} (all devices)",
                     f"torch.initial_seed() is {seed}, not the seed {state['torch_seed']} set by "
                     f"detops.enable_determinism(): something reseeded torch since")]
    checks.append(Check("Python random seed", OK, state["seed"], f"seeded with {state['seed']}"))
    if repro._np is not None:
        checks.append(Check("NumPy global RNG seed", OK, state["numpy_seed"], f"seeded with {state['numpy_seed']}"))
    return checks


def _cublas_check() -> Check:
    value = os.environ.get(repro.CUBLAS_VARIABLE)
    state = repro.last_enable_determinism()
    if value is None:
        return Check(repro.CUBLAS_VARIABLE, PROBLEM, None,
                     f"unset: cuBLAS matmuls raise under the flag on CUDA; export "
                     f"{repro.CUBLAS_VARIABLE}={repro.CUBLAS_DEFAULT} before starting Python")
    if value not in repro.CUBLAS_DETERMINISTIC:
        return Check(repro.CUBLAS_VARIABLE, PROBLEM, value,
                     f"{value!r} is not deterministic; use one of {repro.CUBLAS_DETERMINISTIC}")
    if state.get("cublas_set_by_detops") and state.get("cuda_was_initialized"):
        return Check(repro.CUBLAS_VARIABLE, PROBLEM, value,
                     f"{value!r}, but set by detops after CUDA was initialised: cuBLAS may not follow it; "
                     f"set it in the environment before starting Python")
    return Check(repro.CUBLAS_VARIABLE, OK, value, f"{value!r}")


# Environment variables that change which CPU kernels run, hence the bits of stock CPU ops.
CPU_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA",
                 "DNNL_MAX_CPU_ISA", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS")


def _set_variables(names) -> Dict[str, str]:
    return {name: os.environ[name] for name in names if name in os.environ}


def _thread_checks() -> List[Check]:
    threads = torch.get_num_threads()
    state = repro.last_enable_determinism()
    pinned = state.get("num_threads") if state.get("num_threads_pinned") else None
    why = "stock CPU kernels (convolution, matmul) may change bits with it, detops' ops do not"
    if pinned is not None and threads != pinned:
        intra = Check("intra-op threads", PROBLEM, threads,
                      f"{threads}, but detops.enable_determinism(num_threads={pinned}) pinned {pinned}: "
                      f"torch.set_num_threads was called since; {why}")
    elif pinned is not None:
        intra = Check("intra-op threads", NOTE, threads,
                      f"{threads}, pinned by detops.enable_determinism(num_threads={pinned}); {why}")
    else:
        env = _set_variables(("OMP_NUM_THREADS", "MKL_NUM_THREADS"))
        source = ", ".join(f"{k}={v}" for k, v in env.items()) or "torch's default: the number of physical cores"
        intra = Check("intra-op threads", NOTE, threads,
                      f"{threads} ({source}; not pinned): {why}; pin it with "
                      f"detops.enable_determinism(seed, num_threads=N)")
    interop = torch.get_num_interop_threads()
    return [intra, Check("inter-op threads", NOTE, interop,
                         f"{interop}: they run independent tasks side by side (torch.jit.fork); an op's bits do "
                         f"not depend on their number")]


def _cpu_check() -> Check:
    capability = torch.backends.cpu.get_cpu_capability()
    variables = _set_variables(CPU_VARIABLES[2:])
    value = {"capability": capability, "cpu": repro.cpu_model(), "variables": variables}
    set_text = " (" + ", ".join(f"{k}={v}" for k, v in variables.items()) + ")" if variables else ""
    return Check("CPU capability", NOTE, value,
                 f"{capability}{set_text} on {value['cpu']}: ATen, oneDNN (convolution) and MKL (matmul) pick "
                 f"kernels by instruction set (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA and MKL_CBWR steer them), "
                 f"so stock CPU bits can differ between machines; detops' ops do not")


# NCCL variables that change the order in which an all-reduce adds the ranks' values (and so its bits), with
# what they change. Unset, NCCL chooses each from the topology, the GPU count, its version and the message
# size: the same job on the same machines makes the same choices, run after run.
NCCL_ORDER_VARIABLES: Dict[str, str] = {
    "NCCL_ALGO": "algorithm", "NCCL_PROTO": "protocol", "NCCL_TUNER_PLUGIN": "algorithm, protocol, channels",
    "NCCL_NVLS_ENABLE": "algorithm: NVLink SHARP", "NCCL_COLLNET_ENABLE": "algorithm: CollNet",
    "NCCL_LL_THRESHOLD": "protocol, older NCCL", "NCCL_TREE_THRESHOLD": "algorithm, older NCCL",
    "NCCL_SINGLE_RING_THRESHOLD": "channels, older NCCL",
    "NCCL_MIN_NCHANNELS": "channels", "NCCL_MAX_NCHANNELS": "channels", "NCCL_MIN_CTAS": "channels",
    "NCCL_MAX_CTAS": "channels", "NCCL_NTHREADS": "chunk size", "NCCL_BUFFSIZE": "chunk size",
    "NCCL_LL_BUFFSIZE": "chunk size", "NCCL_LL128_BUFFSIZE": "chunk size",
    "NCCL_TOPO_FILE": "topology", "NCCL_GRAPH_FILE": "rings and trees", "NCCL_P2P_LEVEL": "topology",
    "NCCL_P2P_DISABLE": "topology", "NCCL_SHM_DISABLE": "topology", "NCCL_CROSS_NIC": "topology",
    "NCCL_IB_DISABLE": "topology", "NCCL_NET": "topology",
}


def _nccl_conf_files() -> List[str]:
    """The files NCCL reads variables from, the environment taking precedence: /etc/nccl.conf, then
    $NCCL_CONF_FILE (NCCL >= 2.23) or else ~/.nccl.conf."""
    user = os.environ.get("NCCL_CONF_FILE") or os.path.join(os.path.expanduser("~"), ".nccl.conf")
    return ["/etc/nccl.conf", user]


def _nccl_settings() -> Dict[str, Tuple[str, str]]:
    """Each order-changing NCCL variable that is set: name -> (value, where it is set)."""
    found: Dict[str, Tuple[str, str]] = {}
    for path in _nccl_conf_files():
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        for line in lines:
            key, sep, value = line.split("#", 1)[0].partition("=")
            if sep and key.strip() in NCCL_ORDER_VARIABLES:
                found[key.strip()] = (value.strip(), path)  # the later file wins
    for name in NCCL_ORDER_VARIABLES:
        if name in os.environ:
            found[name] = (os.environ[name], "environment")
    return found


def _nccl_check() -> Check:
    settings = _nccl_settings()
    value = {name: v for name, (v, _) in settings.items()}
    if not settings:
        return Check("NCCL variables", NOTE, value,
                     "none of those that change NCCL's summation order set (NCCL_ALGO, NCCL_PROTO, channels, "
                     "buffer sizes, topology): NCCL picks algorithm, protocol and channels per message size from "
                     "the topology, GPU count and its version: the same choices each run on the same machines, "
                     "maybe others elsewhere")
    listed = ", ".join(f"{name}={v} ({NCCL_ORDER_VARIABLES[name]}{'' if where == 'environment' else '; ' + where})"
                       for name, (v, where) in settings.items())
    algo = settings.get("NCCL_ALGO", ("", ""))[0].upper()
    nvls = ("; NVLS reduces in the NVLink switch, reported to vary between calls with some drivers "
            "(NVIDIA/nccl#1497)" if "NVLS" in algo and not algo.startswith("^") else "")
    return Check("NCCL variables", NOTE, value,
                 f"{listed}: each can change the order of the all-reduce sum; keep them the same between runs you "
                 f"compare{nvls}")


def _distributed_check() -> Check:
    import torch.distributed as dist

    if not dist.is_available():
        return Check("torch.distributed", NOTE, {"available": False}, "not available in this torch build")
    if not dist.is_initialized():
        env = _set_variables(("WORLD_SIZE", "RANK", "LOCAL_RANK"))
        launched = (f"; {', '.join(f'{k}={v}' for k, v in env.items())} in the environment: call detops.doctor() "
                    f"after init_process_group to see the backend and world size" if env else "")
        return Check("torch.distributed", NOTE, {"available": True, "initialized": False, **env},
                     f"not initialised (one process){launched}")
    backend, world, rank = dist.get_backend(), dist.get_world_size(), dist.get_rank()
    value = {"available": True, "initialized": True, "backend": backend, "world_size": world, "rank": rank}
    order = ("each element's all-reduce adds at most two values, which no order changes" if world <= 2 else
             "the order in which the ranks' values are added depends on the backend's algorithm and on where "
             "each element lies in its buffer (DDP's buckets)")
    return Check("torch.distributed", NOTE, value,
                 f"initialised: backend {backend}, world size {world}, rank {rank}; {order}; another world size "
                 f"changes each rank's batches and the sums")


def _ddp_bucket_names(model) -> Optional[List[List[str]]]:
    """A DistributedDataParallel model's buckets as they are now, as parameter names (private torch API:
    None where it is not there)."""
    names = {id(p): name for name, p in model.module.named_parameters()}
    try:
        buckets = model.reducer._get_zeros_like_grad_buckets()
        return [[names.get(id(p), "?") for p in bucket.parameters()] for bucket in buckets]
    except (AttributeError, RuntimeError):
        return None


LAYOUT_WHY = ("with 3 or more ranks a gradient's place in its bucket can change the order of its all-reduce "
              "sum, so runs compared bit for bit need the same bucket_cap_mb, parameter order and "
              "find_unused_parameters")
UNUSED_WHY = ("deterministic either way, but True keeps the buckets built at construction (in parameter order) "
              "and never rebuilds them, while False (or static_graph=True) starts with one bucket and rebuilds "
              "them once, after the first iteration, in the order gradients became ready: with 3 or more ranks "
              "the two can give different bits")


def _ddp_checks(model) -> List[Check]:
    if model is None:
        return [Check("DDP buckets", NOTE, None,
                      f"detops.doctor(model=ddp_model) lists a DistributedDataParallel's buckets; {LAYOUT_WHY}"),
                Check("DDP find_unused_parameters", NOTE, None, UNUSED_WHY)]
    from torch.nn.parallel import DistributedDataParallel

    if not isinstance(model, DistributedDataParallel):
        text = f"{type(model).__name__} is not a DistributedDataParallel: nothing is all-reduced"
        return [Check("DDP buckets", NOTE, None, text), Check("DDP find_unused_parameters", NOTE, None, text)]
    layout = _ddp_bucket_names(model)
    rebuilt = bool(getattr(model, "_has_rebuilt_buckets", False))
    value = {"bucket_cap_mb": model.bucket_bytes_cap / 2**20, "buckets": layout, "rebuilt": rebuilt,
             "static_graph": bool(model.static_graph), "gradient_as_bucket_view": bool(model.gradient_as_bucket_view)}
    shape = (f"{len(layout)} bucket(s) of {', '.join(str(len(b)) for b in layout)} parameter(s)"
             if layout is not None else "bucket layout not readable in this torch")
    state = "rebuilt in gradient-ready order" if rebuilt else "as built at construction"
    unused = bool(model.find_unused_parameters)
    return [Check("DDP buckets", NOTE, value,
                  f"{shape}, bucket_cap_mb={value['bucket_cap_mb']:g}, {state}; {LAYOUT_WHY}"),
            Check("DDP find_unused_parameters", NOTE, unused, f"{unused}: {UNUSED_WHY}")]


def _checks(model=None) -> List[Check]:
    import detops

    checks = _seed_checks()
    checks.append(Check("NumPy Generator objects", NOTE, None,
                        "not global: create each np.random.default_rng(seed) with a seed"))
    flag = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    checks.append(Check("torch.use_deterministic_algorithms", OK if flag and not warn_only else PROBLEM,
                        {"mode": flag, "warn_only": warn_only},
                        "on" if flag and not warn_only else
                        ("on with warn_only=True: nondeterministic ops only warn" if flag else
                         "off: nondeterministic kernels run silently")))
    checks.append(_check("torch.backends.cudnn.deterministic", torch.backends.cudnn.deterministic,
                         torch.backends.cudnn.deterministic, "True",
                         "False: cuDNN may pick nondeterministic algorithms"))
    checks.append(_check("torch.backends.cudnn.benchmark", not torch.backends.cudnn.benchmark,
                         torch.backends.cudnn.benchmark, "False",
                         "True: cuDNN benchmarks and may pick different algorithms run to run"))
    fill = torch.utils.deterministic.fill_uninitialized_memory
    checks.append(_check("torch.utils.deterministic.fill_uninitialized_memory", fill, fill, "True",
                         "False: uninitialised memory (torch.empty) is not filled under the flag"))
    checks.append(_cublas_check())
    rnn_ok = os.environ.get(repro.CUBLAS_VARIABLE) in repro.CUBLAS_DETERMINISTIC + (":4096:2",)
    checks.append(Check("CUDA RNN/LSTM", OK if rnn_ok else PROBLEM, os.environ.get(repro.CUBLAS_VARIABLE),
                        "cuBLAS workspace fixed (torch.nn.RNN/LSTM/GRU notes)" if rnn_ok else
                        "cuDNN RNNs on CUDA >= 10.2 need CUBLAS_WORKSPACE_CONFIG=:16:8 or :4096:2"))
    checks.append(Check("DataLoader workers", NOTE, None,
                        "pass **detops.dataloader_kwargs(seed) (worker_init_fn + seeded generator) to each "
                        "DataLoader with num_workers > 0"))
    hash_seed = os.environ.get("PYTHONHASHSEED")
    checks.append(Check("PYTHONHASHSEED", NOTE, hash_seed,
                        f"{hash_seed!r}" if hash_seed is not None else
                        "unset: set/dict-of-str iteration order differs between processes (spawned workers)"))
    mode = detops.get_mode()
    checks.append(_check("detops", mode != "off", mode,
                         f"libdetops.so loaded, mode {mode!r}, {len(detops.covered_ops())} overloads covered",
                         "mode 'off': the stock kernels run (and throw) under the flag"))
    checks += _thread_checks()
    checks.append(_cpu_check())
    checks.append(_distributed_check())
    checks.append(_nccl_check())
    checks += _ddp_checks(model)
    return checks


def _driver() -> Optional[str]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version,name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return "; ".join(line.strip() for line in out.splitlines() if line.strip()) or None


def versions() -> Dict[str, Optional[str]]:
    import detops

    try:
        cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except RuntimeError:
        cudnn = None
    numpy_version = repro._np.__version__ if repro._np is not None else None
    try:
        # The linked library's version (ncclGetVersion: no CUDA context).
        nccl = ".".join(str(v) for v in torch.cuda.nccl.version()) if torch.version.cuda else None
    except (AttributeError, RuntimeError, TypeError):
        nccl = None
    return {
        "detops": f"{detops.__version__} ({detops.load_library()})",
        "torch": torch.__version__,
        "CUDA (torch build)": torch.version.cuda,
        "cuDNN": str(cudnn) if cudnn is not None else None,
        "NCCL (torch build)": nccl,
        "driver, GPU (nvidia-smi)": _driver(),
        "CUDA initialised": str(torch.cuda.is_initialized()),
        "python": sys.version.split()[0],
        "numpy": numpy_version,
        "platform": platform.platform(),
        "CPU": repro.cpu_model(),
    }


def doctor(model=None) -> DoctorResult:
    """Every source of irreproducibility for this process, OK or not, and the versions. ``model``: a
    ``DistributedDataParallel`` whose buckets and ``find_unused_parameters`` to report (optional)."""
    return DoctorResult(checks=_checks(model), versions=versions())
