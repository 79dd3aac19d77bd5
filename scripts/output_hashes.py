#!/usr/bin/env python3
"""SHA-256 of every output of a fixed, seeded case set, on the CPU twin and the CUDA twin: the order
contract says the bits are the same on every GPU and on the CPU, so two machines' files must agree.

The case set is every covered overload (``detops.covered_ops()``) with the cases registered for it in
``detops.cases`` (``full=False``: the small shapes unless ``--full``), each built on the CPU from a fixed
seed and copied to each device, then run once through ``torch.ops.detops.<name>.<overload>``. The inputs
are hashed too: if two machines disagree on an output, compare ``inputs_sha256`` first (the CPU random
generator's vectorised paths could differ between processors).

    python scripts/output_hashes.py --out hashes.json                  # CPU, and CUDA when there is one
    python scripts/output_hashes.py --devices cpu --ops index_add_ bincount --out -
    python scripts/output_hashes.py --compare a.json b.json            # which cases differ

JSON: {"schema": "detops-output-hashes/1", "context": {...}, "cases": [{"op", "shape", "seed",
"inputs_sha256", "results": {"cpu": {"sha256", "outputs": [{"dtype", "shape", "sha256"}]} or
{"error"}, "cuda": ...}, "cuda_equals_cpu": true/false/null}], "summary": {...}}. No timestamps in
"cases", so the same build gives byte-identical "cases" on every run.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import pathlib
import platform
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
try:
    import detops
except ImportError:
    sys.path.insert(0, str(ROOT / "python_shim"))
    import detops

import torch

from detops import cases as C

SCHEMA = "detops-output-hashes/1"


def tensor_digest(t: torch.Tensor) -> dict:
    """dtype, shape and the SHA-256 of the raw bytes (row-major, contiguous, on the CPU)."""
    t = t.detach().contiguous().cpu()
    data = t.reshape(-1).view(torch.uint8).numpy().tobytes()
    return {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
            "sha256": hashlib.sha256(data).hexdigest()}


def _combined(digests) -> str:
    h = hashlib.sha256()
    for d in digests:
        h.update(json.dumps(d, sort_keys=True).encode())
    return h.hexdigest()


def _inputs_digest(op: str, call: C.Call) -> str:
    items = []
    outs = _out_arguments(op)
    for name, value in [(None, a) for a in call.args] + [(k, call.kwargs[k]) for k in sorted(call.kwargs)]:
        if isinstance(value, torch.Tensor):
            items.append(tensor_digest(value) if name not in outs else {"out": list(value.shape)})
        else:
            items.append({"value": repr(value)})
    return _combined(items)


def _out_arguments(op: str) -> set:
    """The op's output buffers: keyword-only arguments its schema writes (``out``, ``grad_input``,
    ``values``/``indices``, ``output``/``total_weight``). They are torch.empty: their bits are never read
    and differ from run to run, so only their shapes are hashed."""
    name, _, overload = op.split("::", 1)[1].partition(".")
    schema = getattr(getattr(torch.ops.aten, name), overload or "default")._schema
    return {a.name for a in schema.arguments
            if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write}


def run_case(case: C.Case, devices, seed: int, full: bool) -> dict:
    call = case.build(torch.device("cpu"), torch.Generator().manual_seed(seed), full)
    twin = C.twin_op(case.op)
    entry = {"op": case.op, "shape": case.shape, "seed": seed, "inputs_sha256": _inputs_digest(case.op, call),
             "results": {}}
    for device in devices:
        try:
            if twin is None:
                raise RuntimeError(f"no detops twin torch.ops.detops.{case.name}.{case.overload}")
            args, kwargs = C.fresh_args(call, device)
            outputs = [tensor_digest(t) for t in C.output_tensors(twin(*args, **kwargs))]
            entry["results"][device] = {"sha256": _combined(outputs), "outputs": outputs}
        except Exception as e:  # noqa: BLE001 - recorded in the JSON
            entry["results"][device] = {"error": (str(e).strip().splitlines() or [type(e).__name__])[0][:300]}
    cpu, cuda = entry["results"].get("cpu", {}), entry["results"].get("cuda", {})
    entry["cuda_equals_cpu"] = (cpu["sha256"] == cuda["sha256"]) if "sha256" in cpu and "sha256" in cuda else None
    return entry


def run(devices, ops=None, shapes=None, seed: int = 0, full: bool = False) -> dict:
    covered = detops.covered_ops()
    selected = C.cases(covered, ops=ops, shapes=shapes)
    entries = [run_case(case, devices, seed, full) for case in selected]
    errors = sum(1 for e in entries for r in e["results"].values() if "error" in r)
    compared = [e["cuda_equals_cpu"] for e in entries if e["cuda_equals_cpu"] is not None]
    context = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host_name": platform.node(), "machine": platform.machine(), "processor": platform.processor(),
        "detops_version": detops.__version__, "torch": torch.__version__, "cuda": str(torch.version.cuda),
        "cuda_device": torch.cuda.get_device_name(0) if "cuda" in devices else None,
        "devices": list(devices), "seed": seed, "full": full,
        "covered_ops": len(covered), "covered_ops_without_case": sorted(set(covered) - {c.op for c in C.cases(covered)}),
    }
    summary = {"cases": len(entries), "errors": errors, "compared": len(compared),
               "cuda_equals_cpu": sum(1 for c in compared if c),
               "cuda_differs_from_cpu": [f"{e['op']} [{e['shape']}]" for e in entries if e["cuda_equals_cpu"] is False]}
    return {"schema": SCHEMA, "context": context, "cases": entries, "summary": summary}


def compare(a: dict, b: dict) -> list:
    """Lines naming each (case, device) whose output hash differs between two files."""
    index_b = {(e["op"], e["shape"], e["seed"]): e for e in b["cases"]}
    lines = []
    for e in a["cases"]:
        other = index_b.get((e["op"], e["shape"], e["seed"]))
        if other is None:
            lines.append(f"only in the first file: {e['op']} [{e['shape']}]")
            continue
        inputs = "" if e["inputs_sha256"] == other["inputs_sha256"] else " (inputs differ too)"
        for device in sorted(set(e["results"]) | set(other["results"])):
            x, y = e["results"].get(device, {}).get("sha256"), other["results"].get(device, {}).get("sha256")
            if x != y:
                lines.append(f"{device}: {e['op']} [{e['shape']}] differs{inputs}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None, help="JSON file to write ('-': stdout)")
    parser.add_argument("--devices", nargs="+", choices=["cpu", "cuda"], default=None,
                        help="default: cpu, and cuda when a device is available")
    parser.add_argument("--ops", nargs="*", default=None, help="aten overloads, e.g. index_add_ scatter_add.out")
    parser.add_argument("--shapes", nargs="*", default=None, help="case shape names")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--full", action="store_true", help="the full (GPU-sized) shapes instead of the small ones")
    parser.add_argument("--compare", nargs=2, metavar=("A", "B"), default=None,
                        help="compare two hash files; exit status 1 if any output differs")
    args = parser.parse_args(argv)

    if args.compare:
        a, b = (json.loads(pathlib.Path(p).read_text()) for p in args.compare)
        lines = compare(a, b)
        print("\n".join(lines) if lines else f"output_hashes: the same hashes for all {len(a['cases'])} cases")
        return 1 if lines else 0

    devices = args.devices or (["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"])
    if "cuda" in devices and not torch.cuda.is_available():
        print("output_hashes: no CUDA device", file=sys.stderr)
        return 2
    doc = run(devices, args.ops, args.shapes, args.seed, args.full)
    text = json.dumps(doc, indent=1, sort_keys=False)
    if args.out == "-":
        print(text)
    elif args.out:
        pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.out).write_text(text + "\n")
    s = doc["summary"]
    line = f"output_hashes: {s['cases']} cases on {'+'.join(devices)}, {s['errors']} errors"
    if s["compared"]:
        line += f", cuda == cpu for {s['cuda_equals_cpu']}/{s['compared']}"
        if s["cuda_differs_from_cpu"]:
            line += " (differ: " + ", ".join(s["cuda_differs_from_cpu"]) + ")"
    print(line, file=sys.stderr if args.out == "-" else sys.stdout)
    return 1 if s["errors"] or s["cuda_differs_from_cpu"] else 0


if __name__ == "__main__":
    sys.exit(main())
