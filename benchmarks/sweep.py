"""The ops users write, swept over dtypes and sizes: primtrace.jit (default executors)
against eager and torch.compile, timed interleaved in one process. Prints jit/eager and
torch.compile/eager tables, and the summary the README quotes (worst case, cases over
1.1x eager, the median over f16 and bf16 at 2^20).

    python benchmarks/sweep.py                       # every case, f32/f16/bf16, 2^16/2^20/2^24
    python benchmarks/sweep.py --sizes 20 --dtypes f16,bf16 --cases "gelu;silu"
    python benchmarks/sweep.py --no-compile --rounds 3 --json out.json

Each (case, dtype, size) runs its contenders in turn, `rounds` times; a turn is the median
of as many calls as fit in `--time` seconds. The ratio of a round is taken within the round
(the VM's speed drifts between rounds) and the table shows the median over rounds.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import warnings

#: torch.compile's compile workers (a process pool) keep running after it compiles and take
#: a core from whoever is timed next on a small machine: compile in this process
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import primtrace  # noqa: E402
from fusion import bench, compiled  # noqa: E402
from primtrace.executors.numba import NumbaFusionExecutor  # noqa: E402

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}

#: name -> (function, operand kinds): "x" a tensor of the size, "row" a 1024-wide bias row,
#: "t" a transposed (non-contiguous) 2-d tensor of the size
CASES = {
    "a + b": (lambda a, b: a + b, "xx"),
    "a * b": (lambda a, b: a * b, "xx"),
    "a / b": (lambda a, b: a / b, "xx"),
    "a * 1.5": (lambda a: a * 1.5, "x"),
    "relu": (torch.relu, "x"),
    "gelu": (F.gelu, "x"),
    "gelu tanh": (lambda a: F.gelu(a, approximate="tanh"), "x"),
    "silu": (F.silu, "x"),
    "sigmoid": (torch.sigmoid, "x"),
    "tanh": (torch.tanh, "x"),
    "exp": (torch.exp, "x"),
    "sin": (torch.sin, "x"),
    "log1p(|a|)": (lambda a: torch.log1p(a.abs()), "x"),
    "where(a > 0, a, b)": (lambda a, b: torch.where(a > 0, a, b), "xx"),
    "clamp(a, -1, 1)": (lambda a: torch.clamp(a, -1, 1), "x"),
    "silu(a) * b (swiglu)": (lambda a, b: F.silu(a) * b, "xx"),
    "gelu(a + bias)": (lambda a, bias: F.gelu(a + bias), "x" + "r"),
    "gelu(a + b)": (lambda a, b: F.gelu(a + b), "xx"),
    "2a + 3b (axpby)": (lambda a, b: 2 * a + 3 * b, "xx"),
    "a.t() + b": (lambda a, b: a.t() + b, "tx"),
    "silu(a.t()) * b": (lambda a, b: F.silu(a.t()) * b, "tx"),
    "rope: a*c + rotate_half(a)*s": (lambda a, c, s: a * c + _rotate_half(a) * s, "xxx"),
    "cat((a, b)) * 2": (lambda a, b: torch.cat((a, b)) * 2, "xx"),
}


def _rotate_half(x):
    """RoPE's rotation, as transformers writes it: two slices, a negation and a cat."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _operand(kind: str, n: int, dtype, g):
    width = 1024 if n >= 1024 else n
    if kind == "x":
        return torch.randn(n // width, width, generator=g).to(dtype)
    if kind == "r":
        return torch.randn(width, generator=g).to(dtype)
    return torch.randn(width, n // width, generator=g).to(dtype)   # "t": .t() is (rows, width)


def measure(fn, args, contenders: dict, rounds: int, seconds: float) -> dict:
    """{contender: median over rounds of its time / eager's time in the same round}."""
    ratios = {name: [] for name in contenders}
    times = {name: [] for name in contenders}
    for _ in range(rounds):
        got = {name: bench(lambda f=f: f(*args), min_time=seconds, max_reps=20000, warmup=1)
               for name, f in contenders.items()}
        for name, t in got.items():
            ratios[name].append(t / got["eager"])
            times[name].append(t)
    return {name: (statistics.median(r), statistics.median(times[name]))
            for name, r in ratios.items()}


def run(cases, dtypes, sizes, use_compile, rounds, seconds, fuse_all=False) -> list[dict]:
    rows = []
    g = torch.Generator().manual_seed(0)
    for case in cases:
        fn, kinds = CASES[case]
        for dname in dtypes:
            for k in sizes:
                n = 1 << k
                args = [_operand(kind, n, DTYPES[dname], g) for kind in kinds]
                contenders = {"eager": fn, "jit": primtrace.jit(fn)}
                if fuse_all:   # every region fused: what the cost model chooses between
                    contenders["fused"] = primtrace.jit(fn, executors=[
                        NumbaFusionExecutor(cost_model=False)])
                if use_compile:
                    torch._dynamo.reset()
                    contenders["compile"] = compiled(fn)
                for name, f in contenders.items():   # compile, and check the values agree
                    out = f(*args)
                    if name != "eager":
                        torch.testing.assert_close(out, fn(*args), rtol=2e-2, atol=2e-2)
                result = measure(fn, args, contenders, rounds, seconds)
                rows.append({"case": case, "dtype": dname, "log2n": k,
                             "eager_us": result["eager"][1] * 1e6,
                             **{f"{name}/eager": r for name, (r, _) in result.items()
                                if name != "eager"}})
                print(".", end="", flush=True, file=sys.stderr)
    print(file=sys.stderr)
    return rows


def table(rows, column: str, dtypes, sizes) -> str:
    heads = [f"{d} 2^{k}" for d in dtypes for k in sizes]
    lines = ["| case | " + " | ".join(heads) + " |", "|---|" + "---|" * len(heads)]
    cases = list(dict.fromkeys(r["case"] for r in rows))
    for case in cases:
        cells = []
        for d in dtypes:
            for k in sizes:
                r = next((r for r in rows if (r["case"], r["dtype"], r["log2n"]) == (case, d, k)), None)
                v = None if r is None else r.get(column)
                cells.append("-" if v is None else (f"**{v:.2f}**" if v > 1.1 else f"{v:.2f}"))
        lines.append(f"| `{case}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(rows) -> str:
    jit = [(r["jit/eager"], r) for r in rows]
    worst, w = max(jit, key=lambda x: x[0])
    over = sum(v > 1.1 for v, _ in jit)
    half = [v for v, r in jit if r["dtype"] in ("f16", "bf16") and r["log2n"] == 20]
    lines = [f"worst jit/eager: {worst:.2f} (`{w['case']}`, {w['dtype']}, 2^{w['log2n']}); "
             f"{over} of {len(jit)} cases above 1.1x eager"]
    if half:
        lines.append(f"median jit/eager over f16 and bf16 at 2^20: {statistics.median(half):.2f}")
    comp = [r["jit/eager"] / r["compile/eager"] for r in rows if "compile/eager" in r]
    if comp:
        lines.append(f"median jit/torch.compile: {statistics.median(comp):.2f}; "
                     f"worst {max(comp):.2f}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default=";".join(CASES), help="case names, separated by ';'")
    ap.add_argument("--dtypes", default="f32,f16,bf16")
    ap.add_argument("--sizes", default="16,20,24", help="log2 of the element counts")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--fuse-all", action="store_true",
                    help="also time jit with every region fused (NumbaFusionExecutor(cost_model=False))")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--time", type=float, default=0.15, help="seconds per contender per round")
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()
    cases = [c for c in CASES if c in args.cases.split(";")]
    dtypes, sizes = args.dtypes.split(","), [int(s) for s in args.sizes.split(",")]
    warnings.simplefilter("ignore", primtrace.OpaqueOpWarning)
    rows = run(cases, dtypes, sizes, not args.no_compile, args.rounds, args.time, args.fuse_all)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; median of "
          f"{args.rounds} interleaved rounds; ratios to eager (lower is better, bold > 1.1)\n")
    print("primtrace.jit / eager\n")
    print(table(rows, "jit/eager", dtypes, sizes))
    if args.fuse_all:
        print("\njit, every region fused / eager\n")
        print(table(rows, "fused/eager", dtypes, sizes))
    if not args.no_compile:
        print("\ntorch.compile / eager\n")
        print(table(rows, "compile/eager", dtypes, sizes))
    print("\n" + summary(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
