#!/usr/bin/env python3
"""Kernel breakdown of benchmark cases (python_shim/detops/cases.py, full size): where a shape's time goes.

    python scripts/profile_cases.py table aten::histc@high_contention aten::scatter_add@message_passing
        torch.profiler tables, detops (flag on, mode auto) and stock's atomic kernel (flag off, mode off),
        five calls each
    ncu --nvtx --nvtx-include profile/ --section SpeedOfLight --section LaunchStats --section Occupancy \\
        python scripts/profile_cases.py ncu aten::histc@high_contention > ncu.txt
        one detops call per case inside the NVTX range "profile", after two warm-up calls
    python scripts/profile_cases.py ncu-table ncu.txt "histc high_contention"
        ncu's text output as one table per case: duration, DRAM and SM throughput, registers, occupancy,
        grid x block (each case's kernels follow a marker kernel that ncu mode launches; titles in case
        order)

A case is ``<aten op>@<shape>``. ``--device cpu`` runs the table mode on the CPU (the twin against stock's CPU
kernel, small shapes): a dry run.
bench/results/NVIDIA-H200-2026-11-26-2-profile.txt was made this way.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys
from typing import Dict, Iterator, List

ROOT = pathlib.Path(__file__).resolve().parent.parent

_KERNEL = re.compile(r"^  (\S.*) \((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\), Context")
_METRICS = (("us", re.compile(r"^\s+Duration\s+(us|ms|ns|usecond|msecond|nsecond)\s+([\d.,]+)")),
            ("dram", re.compile(r"^\s+DRAM Throughput\s+%\s+([\d.,]+)")),
            ("sm", re.compile(r"^\s+Compute \(SM\) Throughput\s+%\s+([\d.,]+)")),
            ("regs", re.compile(r"^\s+Registers Per Thread\s+register/thread\s+([\d.,]+)")),
            ("occ", re.compile(r"^\s+Achieved Occupancy\s+%\s+([\d.,]+)")))
_TO_US = {"us": 1.0, "usecond": 1.0, "ms": 1000.0, "msecond": 1000.0, "ns": 0.001, "nsecond": 0.001}


def _short_name(head: str) -> str:
    head = head.replace("void ", "").replace("<unnamed>::", "").replace("(anonymous namespace)::", "")
    name = re.sub(r"<.*", "", head.split("(")[0])
    fill = re.search(r"FillFunctor<([^>]*)>", head)
    if fill:
        name += f" (fill {fill.group(1)})"
    if "direct_copy" in head:
        name = "at::direct_copy_kernel"
    return name


def ncu_kernels(text: str) -> Iterator[Dict]:
    """One dict per kernel in ncu's default text output: name, grid, block and the metrics found."""
    cur = None
    for line in text.splitlines():
        m = _KERNEL.match(line)
        if m:
            if cur:
                yield cur
            g = [int(x) for x in m.groups()[1:]]
            cur = {"name": _short_name(m.group(1)), "grid": g[0] * g[1] * g[2], "block": g[3] * g[4] * g[5]}
            continue
        if cur is None:
            continue
        for key, pat in _METRICS:
            mm = pat.match(line)
            if mm and key == "us":
                cur[key] = float(mm.group(2).replace(",", "")) * _TO_US[mm.group(1)]
            elif mm:
                cur[key] = float(mm.group(1).replace(",", ""))
    if cur:
        yield cur


_LEVEL = re.compile(r"\blevel(_rows)?_kernel")
_COUNT = re.compile(r"\bcount_kernel")
# The ncu mode launches this kernel (torch.cuda._sleep) before each case's call, inside the profiled range.
_MARKER = "spin_kernel"


def group_cases(kernels: List[Dict]) -> List[List[Dict]]:
    """Splits the kernels of consecutive cases: at each marker kernel (dropped) where the run has them; in
    older runs, after a case's last level kernel (level_kernel or level_rows_kernel) or count_kernel."""
    if any(_MARKER in k["name"] for k in kernels):
        groups = []
        for k in kernels:
            if _MARKER in k["name"]:
                groups.append([])
            elif groups:
                groups[-1].append(k)
        return groups
    groups: List[List[Dict]] = [[]]
    prev = ""
    for k in kernels:
        if groups[-1] and (_LEVEL.search(prev) or _COUNT.search(prev)) and not _LEVEL.search(k["name"]):
            groups.append([])
        groups[-1].append(k)
        prev = k["name"]
    return groups


def ncu_table(text: str, titles: List[str]) -> str:
    lines = []
    for i, group in enumerate(group_cases(list(ncu_kernels(text)))):
        title = titles[i] if i < len(titles) else f"case {i + 1}"
        lines.append(f"## {title}: {len(group)} kernels, {sum(k.get('us', 0.0) for k in group):.0f} us")
        lines.append(f"  {'us':>8}  {'DRAM%':>5}  {'SM%':>5}  {'regs':>4}  {'occ%':>5}  kernel (grid x block)")
        for k in group:
            lines.append(f"  {k.get('us', 0.0):8.2f}  {k.get('dram', 0.0):5.1f}  {k.get('sm', 0.0):5.1f}  "
                         f"{k.get('regs', 0.0):4.0f}  {k.get('occ', 0.0):5.1f}  {k['name']} ({k['grid']} x {k['block']})")
        lines.append("")
    return "\n".join(lines)


def _select(specs: List[str]):
    from detops import cases as C

    selected = []
    for spec in specs:
        op, _, shape = spec.rpartition("@")
        if not op:
            raise SystemExit(f"profile_cases: '{spec}' is not <aten op>@<shape>")
        found = [c for c in C.cases(ops=[op]) if c.shape == shape]
        if not found:
            raise SystemExit(f"profile_cases: no covered case {spec}")
        selected += found
    return selected


def run(mode: str, specs: List[str], device: str) -> None:
    import torch

    try:
        import detops
    except ImportError:
        sys.path.insert(0, str(ROOT / "python_shim"))
        import detops
    from detops import cases as C

    dev = torch.device(device)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    flag, mode_before = torch.are_deterministic_algorithms_enabled(), detops.get_mode()
    try:
        for case in _select(specs):
            call = case.build(dev, torch.Generator(device=dev).manual_seed(1234), dev.type == "cuda")
            stock = C.aten_op(case.op)
            # detops overrides CUDA kernels only: on the CPU its side is the twin.
            ours = stock if dev.type == "cuda" else C.twin_op(case.op)
            variants = (("detops", True, "auto"),) if mode == "ncu" else (
                ("detops", True, "auto"), ("stock_atomic", False, "off"))
            for label, det, m in variants:
                fn = ours if label == "detops" else stock
                torch.use_deterministic_algorithms(det)
                detops.set_mode(m)
                for _ in range(2):
                    a, k = C.fresh_args(call)
                    fn(*a, **k)
                a, k = C.fresh_args(call)
                sync()
                if mode == "ncu":
                    torch.cuda.nvtx.range_push("profile")
                    torch.cuda._sleep(1)  # the marker that starts the case's kernels (group_cases)
                    fn(*a, **k)
                    sync()
                    torch.cuda.nvtx.range_pop()
                    continue
                activities = [torch.profiler.ProfilerActivity.CPU]
                if dev.type == "cuda":
                    activities.append(torch.profiler.ProfilerActivity.CUDA)
                with torch.profiler.profile(activities=activities, acc_events=True) as prof:
                    for _ in range(5):
                        fn(*a, **k)
                    sync()
                sort = "cuda_time_total" if dev.type == "cuda" else "cpu_time_total"
                print(f"===== {case.op} {case.shape} {label} ({device}, 5 calls)", flush=True)
                print(prof.key_averages().table(sort_by=sort, row_limit=25, max_name_column_width=90), flush=True)
    finally:
        torch.use_deterministic_algorithms(flag)
        detops.set_mode(mode_before)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["table", "ncu", "ncu-table"])
    parser.add_argument("args", nargs="+", help="cases <aten op>@<shape>; for ncu-table: the ncu output, then titles")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    opts = parser.parse_args(argv)
    if opts.mode == "ncu-table":
        print(ncu_table(pathlib.Path(opts.args[0]).read_text(), opts.args[1:]))
        return 0
    if opts.mode == "ncu" and opts.device != "cuda":
        parser.error("ncu mode needs --device cuda")
    run(opts.mode, opts.args, opts.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
