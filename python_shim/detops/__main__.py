"""``python -m detops <command>``: ``report`` (the main job: does detops fix my op, and what does it cost;
see detops/report.py) and ``demo`` (load, turn the flag on, run each covered op)."""

from __future__ import annotations

import argparse
import os
import sys

import torch

import detops


def _ctc_loss_backward(device: str) -> torch.Tensor:
    """CTC loss backward: through autograd on CUDA (the aten override), the twin on CPU."""
    g = torch.Generator().manual_seed(1)
    lp = torch.randn(20, 3, 6, generator=g).log_softmax(2).to(device).requires_grad_(True)
    targets = torch.randint(1, 6, (3, 5), generator=g).to(device)
    il, tl = [20, 18, 15], [5, 4, 3]
    if device == "cuda":
        return torch.autograd.grad(torch.nn.functional.ctc_loss(lp, targets, il, tl), lp)[0]
    nll, log_alpha = torch.ops.aten._ctc_loss(lp.detach(), targets, il, tl, 0, False)
    return torch.ops.detops._ctc_loss_backward(torch.ones(3), lp.detach(), targets, il, tl, nll, log_alpha, 0)


def demo() -> int:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"detops {detops.__version__} from {detops.load_library()}")
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), mode {detops.get_mode()}, device {device}")
    torch.use_deterministic_algorithms(True)
    try:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(8, 4, generator=g).to(device)
        index = torch.randint(0, 8, (32,), generator=g).to(device)
        rows = torch.randn(32, 4, generator=g).to(device)
        index2d = torch.randint(0, 8, (32, 4), generator=g).to(device)
        ops = {
            "index_add": lambda: torch.ops.aten.index_add(x, 0, index, rows, alpha=2)
            if device == "cuda" else torch.ops.detops.index_add(x, 0, index, rows, alpha=2),
            "scatter_add": lambda: torch.ops.aten.scatter_add(x, 0, index2d, rows)
            if device == "cuda" else torch.ops.detops.scatter_add(x, 0, index2d, rows),
            "ctc_loss": lambda: _ctc_loss_backward(device),
        }
        for name, fn in ops.items():
            first, second = fn(), fn()
            same = torch.equal(first, second)
            where = "aten override (CUDA)" if device == "cuda" else "torch.ops.detops twin (CPU)"
            print(f"  {name:12s} ran via {where}: rerun bitwise identical = {same}")
    finally:
        torch.use_deterministic_algorithms(False)
    print("covered:", ", ".join(detops.covered_ops()))
    return 0


def doctor_command() -> int:
    print(detops.doctor().format())
    return 0


def audit_command(target: str, show_all: bool, compiled: bool = False) -> int:
    """Imports ``module:function`` (the module from sys.path or the current directory) and audits a call
    of the function with no arguments (``compiled``: the graphs inductor compiles from it,
    :func:`detops.audit_compiled`); exit status 1 if something would throw, not covered."""
    import importlib

    module_name, _, function_name = target.partition(":")
    if not module_name or not function_name:
        print(f"python -m detops audit: expected module:function, got {target!r}", file=sys.stderr)
        return 2
    if "" not in sys.path:
        sys.path.insert(0, "")
    fn = importlib.import_module(module_name)
    for part in function_name.split("."):
        fn = getattr(fn, part)
    result = detops.audit_compiled(fn) if compiled else detops.audit(fn)
    print(result.format(show_deterministic=show_all))
    return 0 if result.ok else 1


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected 1 or more, got {value}")
    return value


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m detops")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("demo", help="load the library and run the covered ops under the flag")
    report = sub.add_parser("report", help="per covered op: stock under the flag, detops, bitwise reruns, "
                                           "CUDA == CPU twin, time vs stock; writes a PNG chart")
    report.add_argument("--reruns", type=_at_least_one, default=10, help="reruns of each twin for the bitwise check")
    report.add_argument("--reps", type=_at_least_one, default=5, help="timed repetitions (median) per CPU measurement")
    report.add_argument("--out-dir", default=None, help="where the chart goes (default: report/)")
    report.add_argument("--results", default=None, help="a benchmark JSON to show instead of the latest "
                                                        "committed one in bench/results/")
    report.add_argument("--results-dir", default=None, help="where committed GPU results are (bench/results/)")
    report.add_argument("--shapes", nargs="*", default=None, help="only these case shapes")
    sub.add_parser("doctor", help="check every source of irreproducibility in this environment")
    audit_parser = sub.add_parser("audit", help="classify the aten ops a function hits, for CUDA under the flag")
    audit_parser.add_argument("target", help="module:function, called with no arguments (e.g. a script's main)")
    audit_parser.add_argument("--all", action="store_true", help="list the deterministic overloads one per line")
    audit_parser.add_argument("--compiled", action="store_true",
                              help="audit the graphs torch.compile (inductor) makes of the function instead")
    args = parser.parse_args(argv)
    if args.command == "demo":
        return demo()
    if args.command == "doctor":
        return doctor_command()
    if args.command == "audit":
        return audit_command(args.target, args.all, args.compiled)
    if args.command == "report":
        from detops import cases
        from detops.report import run_report

        known = {c.shape for c in cases.all_cases()}
        unknown = sorted(set(args.shapes or ()) - known)
        if unknown:
            parser.error(f"report --shapes: no case has the shape(s) {', '.join(unknown)}; "
                         f"known: {', '.join(sorted(known))}")
        if args.results is not None and not os.path.isfile(args.results):
            parser.error(f"report --results {args.results}: no such file")
        if args.results_dir is not None and not os.path.isdir(args.results_dir):
            parser.error(f"report --results-dir {args.results_dir}: no such directory")

        run_report(reruns=args.reruns, reps=args.reps, out_dir=args.out_dir, results_dir=args.results_dir,
                   results_file=args.results, shapes=args.shapes)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
