"""One rank of tests/programs/test_ddp.py: DistributedDataParallel over primtrace, gloo, CPU.

    python tests/programs/ddp_worker.py RANK WORLD_SIZE STORE_FILE OUT_FILE

Every rank builds the same models (same seed) and trains them on its own data (a generator
seeded by the rank) a few optimizer steps, with eager DDP, ``DDP(primtrace.jit(model))``
and ``torch.compile(DDP(model), backend="primtrace")``, then saves per case and mode the
final parameters, the loss of each step, the type of the output's ``grad_fn`` and what
primtrace says about its traces (fallback reasons, whether a fused backward exists) to
OUT_FILE with ``torch.save``. The test compares the files. One launch runs every case: the
imports, Dynamo's and the first kernel compiles are most of the time.

The ranks meet through a ``FileStore`` (no port to pick, none to collide on).
"""
from __future__ import annotations

import importlib.util
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import primtrace
import primtrace.dynamo

ROOT = Path(__file__).resolve().parents[2]
STEPS = 3


def _gpt_module():
    spec = importlib.util.spec_from_file_location("gpt_example", ROOT / "examples" / "gpt.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gpt = _gpt_module()


class MLP(nn.Module):
    """Linear, LayerNorm, GELU, Linear (a class of ours: Dynamo compiles the frames of user
    modules under DDP, not those of torch's own nn.Sequential)."""

    def __init__(self, d=8, hidden=32, out=4):
        super().__init__()
        self.fc1, self.norm = nn.Linear(d, hidden), nn.LayerNorm(hidden)
        self.fc2 = nn.Linear(hidden, out)

    def forward(self, x):
        return self.fc2(F.gelu(self.norm(self.fc1(x))))


def mlp_case(rank):
    torch.manual_seed(0)
    model = MLP()
    g = torch.Generator().manual_seed(100 + rank)
    data = [(torch.randn(16, 8, generator=g), torch.randn(16, 4, generator=g))
            for _ in range(STEPS)]

    def loss_of(out, target):
        return F.mse_loss(out, target)

    def optimizer(params):
        return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1)
    return model, data, loss_of, optimizer


def gpt_case(rank):
    chars = sorted(set(gpt.TEXT))
    text = torch.tensor([chars.index(c) for c in gpt.TEXT])
    torch.manual_seed(0)
    model = gpt.GPT(gpt.Config(vocab=len(chars), context=8, layers=1, heads=2, width=32))
    g = torch.Generator().manual_seed(100 + rank)
    data = [gpt.batch(text, 8, 4, g) for _ in range(STEPS)]

    def loss_of(out, target):   # the model computes its loss: (logits, loss)
        return out[1]

    def optimizer(params):
        # not AdamW: the key bias's gradient is zero but for rounding (softmax does not see a
        # constant added to a row of scores), and Adam scales that noise up to the step size
        return torch.optim.SGD(params, lr=0.1, momentum=0.9)
    return model, data, loss_of, optimizer


def _grad_fns(out) -> tuple:
    """The name of the output's grad_fn, and of the node under DDP's _DDPSink if it is one."""
    names = (type(out.grad_fn).__name__,)
    if names[0] == "_DDPSinkBackward":
        inner = next(f for f, _ in out.grad_fn.next_functions if f is not None)
        names += (type(inner).__name__,)
    return names


def run(case, mode, rank, **ddp_options):
    """Train one fresh model `STEPS` steps; what the test compares."""
    start = time.perf_counter()
    model, data, loss_of, make_optimizer = case(rank)
    jitted = None
    if mode == "eager":
        wrapped = DDP(model, **ddp_options)
    elif mode == "jit":
        jitted = primtrace.jit(model)
        wrapped = DDP(jitted, **ddp_options)
    else:
        torch._dynamo.reset()
        wrapped = torch.compile(DDP(model, **ddp_options), backend="primtrace")
    if mode != "compile":   # what reaches the model through DDP's nn.Module methods
        wrapped.eval()
        module_api = {"parameters": len(list(wrapped.parameters())),
                      "state_dict": sorted(wrapped.state_dict()), "eval": not model.training}
        wrapped.train()
    optimizer = make_optimizer(model.parameters())
    losses, grad_fns = [], []
    for x, target in data:
        optimizer.zero_grad()
        args = (x,) if case is mlp_case else (x, target)
        out = wrapped(*args)
        grad_fns.append(_grad_fns(out if case is mlp_case else out[0]))
        loss = loss_of(out, target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    result = {"params": {n: p.detach().clone() for n, p in model.named_parameters()},
              "losses": losses, "grad_fns": grad_fns}
    if mode != "compile":
        result["module_api"] = module_api
    if jitted is not None:
        traces = primtrace.last_traces(jitted)
        result["fallbacks"] = [traces[1].tags.get("fallback")]
        result["fused_backward"] = ["backward" in traces[-1].tags]
        result["compiles"] = primtrace.cache_info(jitted).misses
    elif mode == "compile":
        graphs = primtrace.dynamo.graphs()
        result["fallbacks"] = [g.fallback_reason or g.last_traces()[1].tags.get("fallback")
                               for g in graphs]
        result["fused_backward"] = ["backward" in g.last_traces()[-1].tags for g in graphs]
    result["seconds"] = time.perf_counter() - start
    return result


def warm_kernels(store, rank):
    """Rank 0 compiles the fused kernels of each model's training step (Numba, into the disk
    cache) while rank 1 imports Dynamo (the optimizers' first step imports it anyway); rank 1
    then loads the kernels instead of compiling them too (with a cold kernel cache the two
    ranks would compile the same kernels side by side)."""
    if rank == 0:
        for case in (mlp_case, gpt_case):
            model, data, loss_of, _ = case(rank)
            x, target = data[0]
            out = primtrace.jit(model)(*((x,) if case is mlp_case else (x, target)))
            loss_of(out, target).backward()
        store.set("kernels compiled", "1")
    else:
        importlib.import_module("torch._dynamo")
        store.wait(["kernels compiled"])


def main():
    rank, world, store_file, out_file = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    store = dist.FileStore(store_file, world)
    warm_kernels(store, rank)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    results = {}
    for mode in ("eager", "jit", "compile"):
        results["mlp", mode] = run(mlp_case, mode, rank)
        results["gpt", mode] = run(gpt_case, mode, rank)
    # DDP's other modes, through jit: _DDPSink (a custom autograd.Function) around the
    # outputs, the static graph's delayed all-reduce, gradients written into the buckets
    for name, options in (("find_unused_parameters", dict(find_unused_parameters=True)),
                          ("static_graph", dict(static_graph=True)),
                          ("gradient_as_bucket_view", dict(gradient_as_bucket_view=True))):
        for mode in ("eager", "jit"):
            results[f"mlp {name}", mode] = run(mlp_case, mode, rank, **options)
    # Dynamo's DDPOptimizer cuts the graph at bucket boundaries: each piece is differentiated
    # by primtrace alone, and the activations between pieces require grad. Buckets of 512 bytes;
    # its first bucket is torch's default (1 MiB) unless that default is lowered too.
    dist._DEFAULT_FIRST_BUCKET_BYTES = 512
    for mode in ("compile", "eager"):
        results["mlp split graph", mode] = run(mlp_case, mode, rank, bucket_cap_mb=512 / 2**20)
    torch.save(results, out_file)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
