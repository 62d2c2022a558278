"""Bytes saved for backward (issue 19): W13-W17 at their real shapes (benchmarks/training.py),
by eager autograd, torch.compile, and primtrace's backward traces saving every value their
rules read ("save_all") or a min-cut of the forward (``primtrace.autodiff.partition``),
which counts the forward's inputs and outputs as held by the caller ("min_cut") or only the
parameters, as AOTAutograd does ("min_cut, params held").

    python benchmarks/saved_bytes.py                 # all five, eager and torch.compile too
    python benchmarks/saved_bytes.py --no-compile    # skip torch.compile
    python benchmarks/saved_bytes.py --time          # also time forward + backward, both policies
    python benchmarks/saved_bytes.py --scale 0.01    # smaller tensors

Each figure is "intermediates / total" MiB: the bytes of the saved memory that is not a
forward input or output (what saving adds: the caller holds those anyway), and of all of
it; each piece of memory counted once. Only the function's own step: eager and compile's
figures are measured with ``torch.autograd.graph.saved_tensors_hooks`` (cotangent ones),
primtrace's from the traces (``partition.saved_bytes``).
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings

os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import primtrace  # noqa: E402
from primtrace.autodiff import backward_trace, forward_with_saved  # noqa: E402
from primtrace.autodiff.partition import partition, saved_bytes  # noqa: E402
from training import workloads  # noqa: E402

NAMES = ("W13", "W14", "W15", "W16", "W17")
PARAMETERS = {"W13": ("w", "b"), "W14": ("w",)}


def autograd_saved(run, inputs) -> tuple[int, int]:
    """(intermediates, total) bytes autograd saves for one call of `run`."""
    leaves = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]
    held = {t.untyped_storage().data_ptr() for t in leaves}
    storages = {}

    def pack(t):
        s = t.untyped_storage()
        storages[s.data_ptr()] = s.nbytes()
        return t
    for _ in range(2):   # the second call: compiled, and what it saves
        storages.clear()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = run(*leaves)
        held.add(out.untyped_storage().data_ptr())
        out.backward(torch.ones_like(out))
    total = sum(storages.values())
    return total - sum(n for p, n in storages.items() if p in held), total


def primtrace_saved(fn, inputs, parameters) -> dict:
    out = {}
    for policy, held in (("save_all", None), ("min_cut", None), ("params", parameters)):
        forward = primtrace.trace(fn, stage="prims")(*inputs)
        if held is not None:
            held = [p for p in forward.inputs if p.name in held]
        bw = partition(forward, backward_trace(forward), policy=policy.replace("params", "min_cut"),
                       held=held)
        out[policy] = saved_bytes(forward, bw.saved), (forward, bw)
    return out


def step_time(forward, bw, inputs) -> float:
    """Median seconds of the forward (returning its saved values) and the backward, run by
    the default executors (the Numba fusion executor, then torch)."""
    from fusion import bench
    from primtrace.executors import default_executors
    from primtrace.executors.execution_trace import lower
    from primtrace.executors.trace_to_python import compile_trace
    fw_run = compile_trace(lower(forward_with_saved(forward, bw.saved), default_executors()))[0]
    bw_run = compile_trace(lower(bw.trace, default_executors()))[0]
    outputs, _ = fw_run(*inputs)
    g = torch.ones_like(outputs)

    def step():
        _, saved = fw_run(*inputs)
        bw_run(*saved, g)
    return bench(step, min_time=1.0)


def _mib(pair) -> str:
    return f"{pair[0] / 2 ** 20:.3g} / {pair[1] / 2 ** 20:.3g}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated workloads (W13,...,W17)")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--time", action="store_true")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    chosen = args.only.split(",") if args.only else NAMES
    print("MiB saved for backward: intermediates / total\n")
    head = "| workload | eager | torch.compile | save_all | min_cut | min_cut, params held |"
    print(head + (" step ms save_all | step ms min_cut |" if args.time else ""))
    print("|---" * (head.count("|") - 1 + 2 * args.time) + "|")
    for name, (desc, fn, inputs, _) in workloads(args.scale).items():
        if name not in chosen:
            continue
        torch.manual_seed(0)
        eager = autograd_saved(fn, inputs)
        compiled = None if args.no_compile else autograd_saved(torch.compile(fn), inputs)
        ours = primtrace_saved(fn, inputs, PARAMETERS.get(name, ()))
        row = (f"| {name} {desc} | {_mib(eager)} | {'-' if compiled is None else _mib(compiled)} | "
               + " | ".join(_mib(ours[p][0]) for p in ("save_all", "min_cut", "params")) + " |")
        if args.time:
            row += "".join(f" {step_time(*ours[p][1], inputs) * 1e3:.1f} |"
                           for p in ("save_all", "min_cut"))
        print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
