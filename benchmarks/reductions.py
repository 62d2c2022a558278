"""Fused reductions (issue 11): W6-W9 through primtrace (its row kernels) against eager and
torch.compile, timed interleaved in one process; prints ratios to eager per round's median
(absolute times drift on a shared VM, ratios much less).

    python benchmarks/reductions.py                 # all workloads
    python benchmarks/reductions.py --only W6,W7    # a subset
    python benchmarks/reductions.py --no-compile    # skip torch.compile
    python benchmarks/reductions.py --scale 0.01    # smaller tensors (the smoke test)
    python benchmarks/reductions.py --scan          # the cost model's table: softmax,
        # layer_norm, rms_norm and sum at 4 shapes, f32 and bf16, fused (no cost model)

W6  ((q @ k^T) * scale).masked_fill(mask, -inf).softmax(-1), q, k (4, 8, 256, 64) f32
W7  RMSNorm written in torch on bf16 (4096, 2048), computed in f32
W8  F.gelu(F.layer_norm(x + r, (C,), w, b)), (8192, 1024) f32
W9  F.cross_entropy(logits, target), logits (4096, 8192) f32; where primtrace has no
    cross_entropy ref yet, F.log_softmax(logits, -1) (said in the table)

For W7-W9 it also prints a measured roofline: the copy floor (bytes read once + written once
at the copy bandwidth measured here) and the arithmetic's time from cache, and primtrace's
time over each.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

#: torch.compile's compile workers would take a core from whoever is timed next
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import primtrace  # noqa: E402
from fusion import bench, copy_floor  # noqa: E402


# --- workloads --------------------------------------------------------------------------------
def w6(q, k, mask):
    scale = q.shape[-1] ** -0.5
    return ((q @ k.transpose(-2, -1)) * scale).masked_fill(mask, float("-inf")).softmax(-1)


def w7(x, w):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    return (h * w).to(torch.bfloat16)


def w8(x, r, w, b):
    return F.gelu(F.layer_norm(x + r, (x.shape[-1],), w, b))


def w9_cross_entropy(logits, target):
    return F.cross_entropy(logits, target)


def w9_log_softmax(logits, target):
    return F.log_softmax(logits, -1)


def _has_cross_entropy() -> bool:
    from primtrace.refs.nn import functional
    return hasattr(functional, "cross_entropy")


def _n(x: int, scale: float, least: int = 1) -> int:
    return max(least, int(x * scale))


def workloads(scale: float) -> dict:
    g = torch.Generator().manual_seed(0)
    seq = _n(256, scale ** 0.5, 4)
    q = torch.randn(4, 8, seq, 64, generator=g)
    k = torch.randn(4, 8, seq, 64, generator=g)
    mask = torch.ones(seq, seq, dtype=torch.bool).triu(1)   # causal
    rows7, cols7 = _n(4096, scale, 2), 2048
    x7 = torch.randn(rows7, cols7, generator=g).bfloat16()
    w7_ = torch.randn(cols7, generator=g)
    rows8, cols8 = _n(8192, scale, 2), 1024
    x8, r8 = torch.randn(rows8, cols8, generator=g), torch.randn(rows8, cols8, generator=g)
    w8_, b8 = torch.randn(cols8, generator=g), torch.randn(cols8, generator=g)
    rows9, cols9 = _n(4096, scale, 2), 8192
    logits = torch.randn(rows9, cols9, generator=g)
    target = torch.randint(0, cols9, (rows9,), generator=g)
    ce = _has_cross_entropy()
    return {
        "W6": ("masked scaled softmax (4,8,%d,%d) f32" % (seq, seq), w6, (q, k, mask)),
        "W7": ("RMSNorm in torch, bf16 (%d, %d)" % (rows7, cols7), w7, (x7, w7_)),
        "W8": ("gelu(layer_norm(x + r)) (%d, %d) f32" % (rows8, cols8), w8, (x8, r8, w8_, b8)),
        "W9": (("cross_entropy" if ce else "log_softmax (no cross_entropy ref yet)")
               + " (%d, %d) f32" % (rows9, cols9),
               w9_cross_entropy if ce else w9_log_softmax, (logits, target)),
    }


def _fused(jfn) -> str:
    trace = primtrace.last_trace(jfn)
    kinds = ["fused" if n.symbol.kind == "fused" else n.symbol.name for n in trace.nodes]
    return ", ".join(kinds)


def measure(fn, args, contenders: dict, rounds: int, seconds: float) -> dict:
    """{contender: (median ratio to eager, median seconds)}, timed interleaved per round."""
    ratios = {name: [] for name in contenders}
    times = {name: [] for name in contenders}
    for _ in range(rounds):
        got = {name: bench(lambda f=f: f(*args), min_time=seconds, warmup=1)
               for name, f in contenders.items()}
        for name, t in got.items():
            ratios[name].append(t / got["eager"])
            times[name].append(t)
    return {name: (statistics.median(ratios[name]), statistics.median(times[name]))
            for name in contenders}


SCAN_OPS = {
    "softmax": lambda x, w: x.softmax(-1),
    "layer_norm": lambda x, w: F.layer_norm(x, (x.shape[-1],), w, w),
    "rms_norm": lambda x, w: F.rms_norm(x, (x.shape[-1],), w),
    "sum": lambda x, w: x.sum(-1),
}
SCAN_SHAPES = [(64, 1024), (4096, 1024), (8192, 1024), (4096, 8192)]


def scan(scale: float, rounds: int, seconds: float) -> None:
    """Row kernels without the cost model against eager: what cost.py's choices rest on."""
    from primtrace.executors.numba import NumbaFusionExecutor
    every = [NumbaFusionExecutor(cost_model=False), primtrace.TORCH]
    print("| op | dtype | " + " | ".join(f"{r}x{c}" for r, c in SCAN_SHAPES) + " |")
    print("|---|---|" + "---|" * len(SCAN_SHAPES))
    for name, fn in SCAN_OPS.items():
        for dtype in (torch.float32, torch.bfloat16):
            cells = []
            for rows, cols in SCAN_SHAPES:
                x = torch.randn(_n(rows, scale, 2), cols).to(dtype)
                w = torch.randn(cols).to(dtype)
                jfn = primtrace.jit(fn, executors=every)
                jfn(x, w)
                result = measure(fn, (x, w), {"eager": fn, "fused": jfn}, rounds, seconds)
                cells.append(f"{result['fused'][0]:.2f}")
            print(f"| {name} | {str(dtype)[6:]} | " + " | ".join(cells) + " |", flush=True)


#: output elements per row (W9 writes one loss for the whole batch)
_WRITTEN_PER_ROW = {"W7": 1.0, "W8": 1.0, "W9": 0.0}


def roofline(key: str, fn, inputs, ours: float, seconds: float = 0.3) -> str:
    """What bounds a row workload: moving its bytes once (the copy floor) or the kernel's
    own arithmetic (its time per row between two sizes whose rows fit in the last-level
    cache, times all rows: no memory traffic, no per-call cost), whichever is longer, plus
    the page faults of a fresh output (a fault stops the thread: nothing overlaps it)."""
    x = inputs[0]
    rows = x.shape[0]
    read = sum(t.numel() * t.element_size() for t in inputs)
    written = int(x.numel() * _WRITTEN_PER_ROW[key] * x.element_size()) or 8
    floor, fresh = copy_floor(read, written, written)
    # rows whose operands and output fit in 4 MiB, in the last-level cache, and are enough
    # for a parallel kernel and to hide the call's own cost
    row_bytes = (read + written) // rows
    cached = max(2, min(rows, (4 << 20) // row_bytes))
    jsmall = primtrace.jit(fn)

    def timed(n):
        part = [t[:n] if t.dim() and t.shape[0] == rows else t for t in inputs]
        return bench(lambda: jsmall(*part), min_time=seconds)

    # the slope between two cache-resident sizes: a row's arithmetic without the call's cost
    compute = max(timed(cached) - timed(cached // 2), 0.0) / (cached - cached // 2) * rows
    # streaming overlaps the arithmetic; a page fault stops the thread, so faults add
    faults = fresh - floor
    bound = max(floor, compute) + faults
    return (f"{key}: {(read + written) / 2**20:.0f} MiB moved once; copy floor "
            f"{floor * 1e3:.1f} ms ({(read + written) / floor / 1e9:.1f} GB/s), a fresh "
            f"output's page faults {faults * 1e3:.1f} ms; arithmetic from cache "
            f"{compute * 1e3:.1f} ms ({cached} rows at a time); roofline max(copy, "
            f"arithmetic) + faults = {bound * 1e3:.1f} ms; primtrace {ours * 1e3:.1f} ms = "
            f"{ours / floor:.2f}x the copy floor, {ours / bound:.2f}x the roofline")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--time", type=float, default=0.3, help="seconds per contender per round")
    parser.add_argument("--scan", action="store_true", help="the cost model's scan instead")
    args = parser.parse_args()
    if args.scan:
        return scan(args.scale, args.rounds, args.time)
    chosen = set(args.only.split(",")) if args.only else None
    print(f"torch threads {torch.get_num_threads()}, numba threads "
          f"{os.environ.get('NUMBA_NUM_THREADS', 'default')}; {args.rounds} interleaved rounds; "
          "ratios to eager (lower is better)\n")
    print("| workload | what | eager (us) | primtrace / eager | torch.compile / eager | "
          "primtrace kernels |")
    print("|---|---|---|---|---|---|")
    notes = []
    for key, (what, fn, inputs) in workloads(args.scale).items():
        if chosen and key not in chosen:
            continue
        jfn = primtrace.jit(fn)
        expected, got = fn(*inputs), jfn(*inputs)
        torch.testing.assert_close(got.float(), expected.float(), rtol=2e-2, atol=1e-4,
                                   equal_nan=True)
        contenders = {"eager": fn, "primtrace": jfn}
        if not args.no_compile:
            compiled = torch.compile(fn, dynamic=False)
            compiled(*inputs)
            contenders["torch.compile"] = compiled
        result = measure(fn, inputs, contenders, args.rounds, args.time)
        comp = f"{result['torch.compile'][0]:.2f}" if "torch.compile" in result else "-"
        print(f"| {key} | {what} | {result['eager'][1] * 1e6:.0f} | "
              f"{result['primtrace'][0]:.2f} | {comp} | {_fused(jfn)} |", flush=True)
        if key in ("W7", "W8", "W9"):
            notes.append(roofline(key, fn, inputs, result["primtrace"][1], args.time))
    for note in notes:
        print("\n" + note)


if __name__ == "__main__":
    main()
