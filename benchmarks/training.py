"""Training steps (issue 19): W11-W17, forward + backward, through eager, torch.compile,
primtrace.jit and torch.compile(backend="primtrace"), timed interleaved in one process;
prints ratios to eager (median over rounds of each round's ratio), the bytes autograd saves
for backward, and each step's peak memory.

    python benchmarks/training.py                  # all workloads
    python benchmarks/training.py --only W13,W16   # a subset
    python benchmarks/training.py --no-compile     # skip torch.compile (both contenders)
    python benchmarks/training.py --scale 0.01     # smaller tensors (the smoke test)

W11 MLP block nn.Linear(1024, 4096) -> GELU -> nn.Linear(4096, 1024), x (4096, 1024) f32
W12 GPT-2 block (examples/gpt.py), B=4 T=256 C=384, 6 heads, f32
W12a W12 under torch.autocast(cpu, bfloat16) (entered in the forward; W12's parameters)
W13 F.gelu(F.layer_norm(x + r, (C,), w, b)), x, r (8192, 1024) f32
W14 RMSNorm written in torch on bf16 (4096, 2048), computed in f32, times a weight
W15 F.cross_entropy(logits, target), logits (4096, 8192) f32
W16 F.silu(a) * b, (4096, 4096) f32
W17 F.gelu(F.dropout(x, 0.1)), (4096, 4096) f32

A step: forward, loss (the mean of the squared output; W15: its own loss), backward; every
float input and parameter requires grad, and grads are set to None before each step.

Saved: the distinct storages autograd keeps for backward, summed
(``torch.autograd.graph.saved_tensors_hooks`` sees every contender's: eager's nodes and
the compiled functions' ``save_for_backward``). Peak: the step's high-water mark of resident
memory above what was resident before it (Linux ``VmHWM`` reset through ``clear_refs``),
measured in a child process whose malloc returns every block over 64 KiB to the system (so
freed tensors are not counted as resident). The copy floor reads every input once and
writes every gradient once (a copy of those bytes): a step cannot move fewer.
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import statistics
import subprocess
import sys
import warnings

os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

import primtrace  # noqa: E402
from fusion import bench, copy_floor  # noqa: E402


# --- workloads: (function or module, inputs, loss of its output) ----------------------------
def _square_mean(y):
    return y.float().pow(2).mean()


def w13(x, r, w, b):
    return F.gelu(F.layer_norm(x + r, (x.shape[-1],), w, b))


def w14(x, w):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    return (h * w).to(torch.bfloat16)


def w15(logits, target):
    return F.cross_entropy(logits, target)


def w16(a, b):
    return F.silu(a) * b


def w17(x):
    return F.gelu(F.dropout(x, 0.1))


class _Autocast(nn.Module):
    """`inner` under torch.autocast(cpu, bfloat16): eager's step and the traced casts'."""
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, *args):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.inner(*args)


def _n(x: int, scale: float, least: int = 2) -> int:
    return max(least, int(x * scale))


def workloads(scale: float) -> dict:
    """name -> (description, fn, inputs, loss); inputs that are float tensors require grad."""
    from gpt import Block, Config
    g = torch.Generator().manual_seed(0)

    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g).to(dtype)

    torch.manual_seed(0)
    rows = _n(4096, scale)
    mlp = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024))
    seq = _n(256, scale ** 0.5, 8)
    block = Block(Config(vocab=1, context=seq, heads=6, width=384))
    r13, r15 = _n(8192, scale), _n(4096, scale)
    return {
        "W11": (f"MLP block 1024-4096-1024, x ({rows}, 1024) f32", mlp,
                [randn(rows, 1024)], _square_mean),
        "W12": (f"GPT-2 block B=4 T={seq} C=384 f32", block, [randn(4, seq, 384)], _square_mean),
        "W12a": (f"GPT-2 block B=4 T={seq} C=384 autocast bf16", _Autocast(block),
                 [randn(4, seq, 384)], _square_mean),
        "W13": (f"gelu(layer_norm(x + r)) ({r13}, 1024) f32", w13,
                [randn(r13, 1024), randn(r13, 1024), randn(1024), randn(1024)], _square_mean),
        "W14": (f"RMSNorm bf16 ({rows}, 2048), f32 math", w14,
                [randn(rows, 2048, dtype=torch.bfloat16), randn(2048)], _square_mean),
        "W15": (f"cross_entropy ({r15}, 8192) f32", w15,
                [randn(r15, 8192), torch.randint(0, 8192, (r15,), generator=g)], lambda y: y),
        "W16": (f"silu(a) * b ({rows}, 4096) f32", w16,
                [randn(rows, 4096), randn(rows, 4096)], _square_mean),
        "W17": (f"gelu(dropout(x, 0.1)) ({rows}, 4096) f32", w17, [randn(rows, 4096)], _square_mean),
    }


def contenders(fn, use_compile: bool) -> dict:
    out = {"eager": fn, "primtrace.jit": primtrace.jit(fn)}
    if use_compile:
        out["torch.compile"] = torch.compile(fn)
        out["compile(backend=primtrace)"] = torch.compile(fn, backend="primtrace")
    return out


def _leaves(fn, inputs) -> list:
    params = list(fn.parameters()) if isinstance(fn, nn.Module) else []
    return params + [t for t in inputs if t.is_floating_point()]


def prepare(fn, inputs):
    """The inputs as leaves that require grad (fresh copies), and the leaves with grads."""
    inputs = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]
    return inputs, _leaves(fn, inputs)


def make_step(run, fn, inputs, loss_of):
    inputs, leaves = prepare(fn, inputs)

    def step():
        for t in leaves:
            t.grad = None
        loss_of(run(*inputs)).backward()
    return step, leaves


def saved_bytes(step) -> int:
    storages = {}

    def pack(t):
        s = t.untyped_storage()
        storages[s.data_ptr()] = s.nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step()
    return sum(storages.values())


def check_grads(runs: dict, fn, inputs, loss_of, dropout: bool) -> None:
    """Every contender's grads against eager's (dropout: shapes only, the masks differ)."""
    results = {}
    for name, run in runs.items():
        torch.manual_seed(0)
        step, leaves = make_step(run, fn, inputs, loss_of)
        step()
        results[name] = [t.grad for t in leaves]
    for name, grads in results.items():
        for got, want in zip(grads, results["eager"]):
            if dropout:
                assert got.shape == want.shape, name
            else:
                torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=1e-3, msg=name)


# --- peak memory, in a child process ----------------------------------------------------------
def _resident(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    return 0


def peak_bytes(step, leaves) -> int | None:
    """High-water resident bytes of one step above the resident bytes before it (the last
    step's grads freed first: the step makes new ones)."""
    for t in leaves:
        t.grad = None
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")   # resets VmHWM to the current resident size
    except OSError:
        return None
    before = _resident("VmRSS:")
    step()
    return _resident("VmHWM:") - before


def _memory_child(names, scale: float, use_compile: bool) -> dict:
    """Runs in the child: malloc's mmap threshold fixed at 64 KiB (every tensor is its own
    mapping, returned to the system when freed), then each contender's step twice, the
    second measured."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(-3, 64 * 1024)   # M_MMAP_THRESHOLD
    libc.mallopt(-1, 0)           # M_TRIM_THRESHOLD
    out = {}
    for name, (_, fn, inputs, loss_of) in workloads(scale).items():
        if name not in names:
            continue
        for who, run in contenders(fn, use_compile).items():
            step, leaves = make_step(run, fn, inputs, loss_of)
            step()
            out[f"{name}/{who}"] = peak_bytes(step, leaves)
    return out


def peaks(names, scale: float, use_compile: bool) -> dict:
    code = (f"import sys, json; sys.path.insert(0, {HERE!r}); import training; "
            f"print(json.dumps(training._memory_child({sorted(names)!r}, {scale!r}, {use_compile!r})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode != 0:
        print("peak memory child failed:", done.stderr[-1000:], file=sys.stderr)
        return {}
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- the table ---------------------------------------------------------------------------------
def _mib(n) -> str:
    return "-" if n is None else f"{n / 2 ** 20:.0f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated workloads (W11,...,W17)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--time", type=float, default=0.5, help="seconds per contender per round")
    ap.add_argument("--scale", type=float, default=1.0, help="scale the row counts (smoke test)")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--no-memory", action="store_true", help="skip the peak-memory child")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    chosen = workloads(args.scale)
    if args.only:
        chosen = {k: v for k, v in chosen.items() if k in args.only.split(",")}
    use_compile = not args.no_compile
    peak = {} if args.no_memory else peaks(set(chosen), args.scale, use_compile)
    print(f"threads: {torch.get_num_threads()}, rounds: {args.rounds}; ratios to eager, "
          f"median over rounds of each round's ratio\n")
    print("| workload | contender | step (ms) | x eager | x copy floor | saved MiB | peak MiB |")
    print("|---|---|---|---|---|---|---|")
    for name, (desc, fn, inputs, loss_of) in chosen.items():
        runs = contenders(fn, use_compile)
        check_grads(runs, fn, inputs, loss_of, dropout=name == "W17")
        steps = {who: make_step(run, fn, inputs, loss_of) for who, run in runs.items()}
        saved = {who: saved_bytes(step) for who, (step, _) in steps.items()}
        leaves = steps["eager"][1]
        moved = sum(t.numel() * t.element_size() for t in inputs) + sum(
            t.numel() * t.element_size() for t in leaves)
        floor, _ = copy_floor(moved // 2, moved - moved // 2)
        rounds = []
        for _ in range(args.rounds):
            rounds.append({who: bench(step, min_time=args.time) for who, (step, _) in steps.items()})
        for who in runs:
            ratio = statistics.median(r[who] / r["eager"] for r in rounds)
            ms = statistics.median(r[who] for r in rounds) * 1e3
            over_floor = statistics.median(r[who] for r in rounds) / floor
            print(f"| {name} {desc} | {who} | {ms:.2f} | {ratio:.2f} | {over_floor:.1f} | "
                  f"{_mib(saved[who])} | {_mib(peak.get(f'{name}/{who}'))} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
