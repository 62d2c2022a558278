"""W20: a cross-entropy over the tokens a boolean mask selects (issue 20, data-dependent
sizes), ``F.cross_entropy(logits[mask], target[mask])``, logits (8192, 8192) f32, through
eager, primtrace.jit (the selection sunk into the loss's sum: every row's loss computed in
one fused row kernel, summed where the mask is True; and with ``sink_selections=False``:
the selection made, the loss as torch's call) and torch.compile, timed interleaved in one
process; prints ratios to eager per round's median (absolute times drift on a shared VM,
ratios much less). One compile serves every mask: the count is a size known at run time.

    python benchmarks/masked_loss.py                    # kept fractions 0.9, 0.5, 0.1
    python benchmarks/masked_loss.py --fractions 0.75   # one fraction
    python benchmarks/masked_loss.py --no-compile       # skip torch.compile
    python benchmarks/masked_loss.py --scale 0.01       # smaller logits (the smoke test)
"""
from __future__ import annotations

import argparse
import os
import sys

#: torch.compile's compile workers would take a core from whoever is timed next
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import primtrace  # noqa: E402
from reductions import measure  # noqa: E402


def w20(logits, target, mask):
    return F.cross_entropy(logits[mask], target[mask])


def inputs(rows: int, cols: int, fraction: float, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, cols, generator=g)
    target = torch.randint(0, cols, (rows,), generator=g)
    mask = torch.rand(rows, generator=g) < fraction
    return logits, target, mask


def _kernels(jfn) -> str:
    trace = primtrace.last_trace(jfn)
    return ", ".join("fused" if n.symbol.kind == "fused" else n.symbol.name for n in trace.nodes)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fractions", default="0.9,0.5,0.1",
                        help="fractions of the rows the mask keeps")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--scale", type=float, default=1.0, help="of the 8192 rows")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--time", type=float, default=0.3, help="seconds per contender per round")
    args = parser.parse_args()
    rows, cols = max(2, int(8192 * args.scale)), 8192
    fractions = [float(f) for f in args.fractions.split(",")]
    print(f"W20 F.cross_entropy(logits[mask], target[mask]), logits ({rows}, {cols}) f32, no "
          f"grad; torch threads {torch.get_num_threads()}, numba threads "
          f"{os.environ.get('NUMBA_NUM_THREADS', 'default')}; {args.rounds} interleaved rounds; "
          "ratios to eager (lower is better)\n")
    sunk = primtrace.jit(w20)
    kept = primtrace.jit(w20, sink_selections=False)
    compiled = None if args.no_compile else torch.compile(w20)
    print("| kept | eager (ms) | primtrace / eager | primtrace, selection made / eager | "
          "torch.compile / eager |")
    print("|---|---|---|---|---|")
    kernels = None
    with torch.no_grad():
        for i, fraction in enumerate(fractions):
            logits, target, mask = inputs(rows, cols, fraction, seed=i)
            expected = w20(logits, target, mask)
            contenders = {"eager": w20, "primtrace": sunk, "kept": kept}
            if compiled is not None:
                contenders["torch.compile"] = compiled
            for name, fn in contenders.items():
                torch.testing.assert_close(fn(logits, target, mask), expected, rtol=1e-5,
                                           atol=1e-6, msg=lambda m, name=name: f"{name}: {m}")
            kernels = kernels or _kernels(sunk)
            result = measure(w20, (logits, target, mask), contenders, args.rounds, args.time)
            eager_ms = result["eager"][1] * 1e3
            cells = [f"{result[k][0]:.2f}" if k in result else "-"
                     for k in ("primtrace", "kept", "torch.compile")]
            print(f"| {fraction:.0%} | {eager_ms:.1f} | " + " | ".join(cells) + " |", flush=True)
    info = primtrace.cache_info(sunk)
    print(f"\nprimtrace compiles for {len(fractions)} masks of different counts: "
          f"{info.misses}; its execution trace: {kernels}")


if __name__ == "__main__":
    main()
