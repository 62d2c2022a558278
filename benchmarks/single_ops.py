"""Every common single op, fused and through jit, against eager: the evidence behind the
Numba executor's cost model (primtrace/executors/numba/cost.py).

    python benchmarks/single_ops.py                 # f16, bf16, f32 at 2^16 and 2^20
    python benchmarks/single_ops.py --ops neg,abs --sizes 20

For each op it prints `fused/eager` (every call compiled into a kernel:
NumbaFusionExecutor(cost_model=False)) and `jit/eager` (the default executors, where the cost
model leaves a call to torch when torch's kernel is faster), medians of interleaved rounds
in one process. Inputs are randn (with rand + 0.25 for ops defined only for positive
values); eager's fast paths for some inputs (elu on positive values) show up as losses.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import warnings

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import primtrace  # noqa: E402
from fusion import bench  # noqa: E402
from primtrace.executors.numba import NumbaFusionExecutor  # noqa: E402

POSITIVE = {"sqrt", "rsqrt", "log", "log2", "log1p", "lgamma", "digamma", "reciprocal"}
UNARY = ["neg", "abs", "sqrt", "rsqrt", "exp", "exp2", "expm1", "log", "log2", "log1p", "sin",
         "cos", "tan", "atan", "asin", "erf", "erfc", "sigmoid", "tanh", "sinh", "cosh",
         "floor", "ceil", "round", "trunc", "reciprocal", "square", "sign", "frac", "isnan",
         "relu", "logical_not", "lgamma", "digamma", "erfinv"]
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "pow", "atan2", "eq", "lt", "fmod",
          "remainder", "hypot", "copysign", "logaddexp", "xlogy", "floor_divide"]
ACTIVATIONS = {"hardtanh": F.hardtanh, "leaky_relu": F.leaky_relu, "elu": F.elu,
               "softplus": F.softplus, "mish": F.mish, "hardswish": F.hardswish,
               "hardsigmoid": F.hardsigmoid, "gelu": F.gelu, "silu": F.silu,
               "gelu_tanh": lambda a: F.gelu(a, approximate="tanh"),
               "logsigmoid": F.logsigmoid, "softsign": F.softsign, "relu6": F.relu6}
OPS = {**{u: (getattr(torch, u), 1) for u in UNARY}, **{b: (getattr(torch, b), 2) for b in BINARY},
       **{k: (v, 1) for k, v in ACTIVATIONS.items()}}
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}


def _inputs(name, arity, n, dtype, g):
    if name in POSITIVE:
        return [(torch.rand(n, generator=g) + 0.25).to(dtype) for _ in range(arity)]
    return [torch.randn(n, generator=g).to(dtype) for _ in range(arity)]


def ratios(fn, args, rounds, seconds) -> tuple[float, float]:
    """(fused/eager, jit/eager): medians over interleaved rounds."""
    fused = primtrace.jit(fn, executors=[NumbaFusionExecutor(cost_model=False)])
    jitted = primtrace.jit(fn)
    fused(*args), jitted(*args)
    rf, rj = [], []
    for _ in range(rounds):
        te = bench(lambda: fn(*args), min_time=seconds)
        rf.append(bench(lambda: fused(*args), min_time=seconds) / te)
        rj.append(bench(lambda: jitted(*args), min_time=seconds) / te)
    return statistics.median(rf), statistics.median(rj)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--dtypes", default="f16,bf16,f32")
    ap.add_argument("--sizes", default="16,20", help="log2 of the element counts")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--time", type=float, default=0.03, help="seconds per contender per round")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    dtypes, sizes = args.dtypes.split(","), [int(s) for s in args.sizes.split(",")]
    heads = [f"{d} 2^{k}" for d in dtypes for k in sizes]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; cells: "
          "fused/eager | jit/eager (lower is better)\n")
    print("| op | " + " | ".join(heads) + " |\n|---|" + "---|" * len(heads))
    g = torch.Generator().manual_seed(0)
    worst = (0.0, "")
    for name in args.ops.split(","):
        fn, arity = OPS[name]
        cells = []
        for d in dtypes:
            for k in sizes:
                try:
                    f, j = ratios(fn, _inputs(name, arity, 1 << k, DTYPES[d], g),
                                  args.rounds, args.time)
                except Exception as e:   # an op a dtype does not support
                    cells.append(type(e).__name__)
                    continue
                cells.append(f"{f:.2f} \\| {'**%.2f**' % j if j > 1.1 else '%.2f' % j}")
                worst = max(worst, (j, f"{name} {d} 2^{k}"))
        print(f"| `{name}` | " + " | ".join(cells) + " |", flush=True)
    print(f"\nworst jit/eager: {worst[0]:.2f} ({worst[1]})")


if __name__ == "__main__":
    main()
