#!/usr/bin/env python3
"""The engine's key-chunk path on a GPU: one scatter_add_ of more than 2^31 contributions (ops/key_chunks.h).

    python scripts/large_call.py            # needs about 100 GB of free GPU memory (an H200)

1. 2^31 + 2^20 + 5 ones into 2^20 + 7 destinations (index i -> i mod (2^20 + 7)): every destination's sum is
   its count, exact in float32, checked against bincount; the chunk kernels must appear in the profile.
2. The same call with every contribution on destination 0: more than one plan can take for one key, so it
   must raise a RuntimeError naming the op (not crash, not hang).
Prints one line per check and exits 1 if one fails.
"""

from __future__ import annotations

import sys
import time

import torch

import detops


def main() -> int:
    if not torch.cuda.is_available():
        print("large_call: no CUDA device")
        return 0
    free, _ = torch.cuda.mem_get_info()
    need = 100 << 30
    if free < need:
        print(f"large_call: SKIPPED, {free >> 30} GiB free, needs about {need >> 30} GiB")
        return 0
    n = (1 << 31) + (1 << 20) + 5
    m = (1 << 20) + 7
    failed = 0
    torch.use_deterministic_algorithms(True)
    detops.set_mode("always")
    index = torch.arange(n, device="cuda")
    index.remainder_(m)
    src = torch.ones(n, device="cuda")
    out = torch.zeros(m, device="cuda")
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        out.scatter_add_(0, index, src)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
    kernels = {e.key for e in prof.key_averages()}
    chunked = any("chunk_mask_kernel" in k for k in kernels)
    expected = torch.bincount(index, minlength=m).float()
    exact = torch.equal(out, expected)
    ok = exact and chunked
    failed += not ok
    print(f"large_call: scatter_add_ of {n} contributions into {m} destinations: "
          f"{'ok' if ok else 'FAIL'} (exact: {exact}, key chunks ran: {chunked}, {seconds:.2f} s, "
          f"peak {torch.cuda.max_memory_allocated() >> 20} MiB)")
    index.zero_()
    out.zero_()
    try:
        out.scatter_add_(0, index, src)
        torch.cuda.synchronize()
        print("large_call: one destination over the limit: FAIL (no error)")
        failed += 1
    except RuntimeError as e:
        message = str(e).splitlines()[0]
        ok = "scatter_add" in message
        failed += not ok
        print(f"large_call: one destination over the limit: {'ok' if ok else 'FAIL'} ({message})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
