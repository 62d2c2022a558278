"""AdamW written with Tensor.copy_ (each new value computed, then written over the old one),
through primtrace + Numba, against eager, torch.compile, optim.AdamW(fused=True) and the
in-place bandwidth floor, timed interleaved in one process; prints ratios.

    python benchmarks/adamw_copy.py                      # 8 params x 2M f32 elements, 5 rounds
    python benchmarks/adamw_copy.py --params 2 --size 2097152 --rounds 3
    python benchmarks/adamw_copy.py --show-kernel        # the fused kernel's source, then exit

Under primtrace each copy_ is a ``prims.copy_to`` that the Numba executor turns into a
store: m, v and p of a parameter are written by the kernel that computes them (same-shape
parameters may share one kernel). The floor is a copy moving the bytes the step must move
(p, g, m, v read; p, m, v written: 28 bytes per element) between preallocated buffers
(``fusion.copy_floor``). Each round times every contender once (``fusion.bench``: the median
of calls over 0.4 s); the table gives the median over rounds and the spread of the per-round
ratios, because the absolute times of a shared VM drift between rounds.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import primtrace  # noqa: E402
from fusion import bench, compiled, copy_floor, ours  # noqa: E402

READ_BYTES, WRITE_BYTES = 4 * 4, 3 * 4   # per element: p, g, m, v read; p, m, v written


def adamw_copy(params, grads, exp_avgs, exp_avg_sqs, lr, beta1, beta2, eps, weight_decay, step):
    """One AdamW step (torch.optim.AdamW's arithmetic) as new values copied over the old."""
    bias_correction1 = 1 - beta1 ** step
    bias_correction2_sqrt = (1 - beta2 ** step) ** 0.5
    step_size = lr / bias_correction1
    for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs):
        m.copy_(beta1 * m + (1 - beta1) * g)
        v.copy_(beta2 * v + (1 - beta2) * g * g)
        denom = v.sqrt() / bias_correction2_sqrt + eps
        p.copy_(p * (1 - lr * weight_decay) - step_size * m / denom)


HYPER = dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=1e-2, step=3)


def make_state(params, size, seed=0):
    g = torch.Generator().manual_seed(seed)
    ps = [torch.randn(size, generator=g) for _ in range(params)]
    gs = [torch.randn(size, generator=g) for _ in range(params)]
    ms = [torch.randn(size, generator=g) * 0.1 for _ in range(params)]
    vs = [torch.rand(size, generator=g) * 0.01 for _ in range(params)]
    return ps, gs, ms, vs


def check(params, size):
    """primtrace's step writes what eager writes, to rounding: the arithmetic is the same, but
    eager's vectorized float32 sqrt is not always correctly rounded (AVX-512: 1 ulp off on
    about 15% of inputs) and the kernel's is."""
    ours_state, eager_state = make_state(params, size), make_state(params, size)
    fn = ours(adamw_copy)
    with torch.no_grad():
        fn(*ours_state, **HYPER)
        adamw_copy(*eager_state, **HYPER)
    for a, b in zip(sum(ours_state, []), sum(eager_state, [])):
        torch.testing.assert_close(a, b)
    return fn


def fused_adamw(state):
    params = [torch.nn.Parameter(p.clone()) for p in state[0]]
    for p, g in zip(params, state[1]):
        p.grad = g.clone()
    return torch.optim.AdamW(params, lr=HYPER["lr"], weight_decay=HYPER["weight_decay"],
                             fused=True).step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--params", type=int, default=8)
    ap.add_argument("--size", type=int, default=2 * 1024 * 1024, help="elements per parameter")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--show-kernel", action="store_true")
    args = ap.parse_args()
    jfn = check(args.params, min(args.size, 4096))
    if args.show_kernel:
        print(primtrace.last_trace(jfn))
        print(primtrace.kernel_source(jfn))
        return
    state = make_state(args.params, args.size)
    contenders = {"eager": lambda: adamw_copy(*state, **HYPER)}
    if not args.no_compile:
        compiled_fn = compiled(adamw_copy)
        contenders["torch.compile"] = lambda: compiled_fn(*state, **HYPER)
    jfn = ours(adamw_copy)
    contenders["primtrace"] = lambda: jfn(*state, **HYPER)
    contenders["optim.AdamW(fused)"] = fused_adamw(state)
    elements = args.params * args.size
    times = {name: [] for name in [*contenders, "in-place floor"]}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(args.rounds):
            for name, fn in contenders.items():
                times[name].append(bench(fn))
            times["in-place floor"].append(copy_floor(READ_BYTES * elements, WRITE_BYTES * elements)[0])
    regions = [n for n in primtrace.last_trace(jfn).nodes if n.symbol.name.startswith("numba_fusion")]
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}; AdamW with copy_, "
          f"{args.params} params x {args.size} f32 elements; {args.rounds} interleaved rounds; "
          f"primtrace: {len(regions)} fused kernel(s)\n")
    print("| contender | median time | / in-place floor (min-max) | / torch.compile (min-max) "
          "| / eager |")
    print("|---|---|---|---|---|")
    for name, ts in times.items():
        cells = [f"{statistics.median(ts) * 1e3:.2f} ms"]
        for base in ("in-place floor", "torch.compile"):
            if base not in times:
                cells.append("-")
                continue
            ratios = [t / b for t, b in zip(ts, times[base])]
            cells.append(f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})")
        cells.append(f"{statistics.median(ts) / statistics.median(times['eager']):.2f}")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
