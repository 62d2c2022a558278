"""The CUDA backend on a real GPU: conformance samples moved to the device, every region
fused (no cost model), compared with eager on the same device; and training steps through
jit. Skipped where torch sees no GPU (CI, this machine); run on a lent GPU as

    PRIMTRACE_GPU_SECONDS=40 python -m pytest -q tests/numba/test_cuda_device.py

``PRIMTRACE_GPU_SECONDS`` bounds each conformance module's time (Numba compiles every kernel
the first time it runs): the samples are spread over every op, so a bound still covers all.
"""
from __future__ import annotations

import os
import time
import warnings

import pytest
import torch
import torch.nn.functional as F

import primtrace
from tests.conformance import (test_binary, test_reductions, test_softmax_norms_losses,
                               test_special, test_ternary, test_unary)
from tests.conformance.harness import SampleInput, check_sample, samples
from tests.numba.helpers import fused, fused_nodes

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

MODULES = [test_unary, test_binary, test_ternary, test_reductions, test_softmax_norms_losses,
           test_special]
SECONDS = float(os.environ.get("PRIMTRACE_GPU_SECONDS", "60"))

#: eager's CUDA kernels take dtypes its CPU kernels refuse; the refs raise the CPU's errors
#: (refs/checks.py has one dtype table per kernel, not one per device). Seen on an H200.
DEVICE_DIFFERENCES = {("abs", "bool"), ("absolute", "bool"), ("igamma", "float16"),
                      ("igammac", "float16")}


def to_cuda(obj):
    """`obj` with every tensor copied to the GPU with its exact strides and offset (`.cuda()`
    makes non-dense views contiguous)."""
    if isinstance(obj, torch.Tensor):
        n = obj.untyped_storage().nbytes() // obj.element_size()
        flat = torch.empty(0, dtype=obj.dtype).set_(obj.untyped_storage(), 0, (n,), (1,))
        return flat.cuda().as_strided(obj.shape, obj.stride(), obj.storage_offset())
    if isinstance(obj, (tuple, list)):
        return type(obj)(to_cuda(o) for o in obj)
    if isinstance(obj, dict):
        return {k: to_cuda(v) for k, v in obj.items()}
    return obj


def _spread(module, per_op):
    """Round-robin over the module's ops: the i-th sample of every op before the (i+1)-th."""
    lists = [(spec, list(samples(spec))) for spec in module.SPECS]
    for i in range(per_op):
        for spec, sample_list in lists:
            if sample_list:
                step = max(1, len(sample_list) // per_op)
                if i * step < len(sample_list):
                    yield spec, sample_list[i * step]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__.split(".")[-1])
def test_conformance_on_the_gpu(module):
    deadline = time.perf_counter() + SECONDS
    failures, checked, kernels = [], 0, 0
    for spec, s in _spread(module, per_op=4):
        if time.perf_counter() > deadline:
            break
        if (spec.name, s.desc.split()[0]) in DEVICE_DIFFERENCES:
            continue
        sample = SampleInput(to_cuda(s.args), to_cuda(s.kwargs), s.desc)
        jfn = fused(spec.torch_fn)
        problem = check_sample(jfn, spec.torch_fn, sample)
        checked += 1
        if problem:
            failures.append(f"{spec.name} [{s.desc}] {problem}")
        elif jfn._last is not None:
            kernels += len(fused_nodes(primtrace.last_trace(jfn)))
    print(f"{module.__name__}: {checked} samples, {kernels} fused kernels, "
          f"{len(failures)} failures")
    assert checked > 0 and kernels > 0
    assert not failures, "\n".join(failures[:20])


def _steps():
    C = 256
    w, b = torch.randn(C), torch.randn(C)
    yield "layer_norm+gelu", lambda x, r, w, b: F.gelu(F.layer_norm(x + r, (C,), w, b)), [
        torch.randn(512, C), torch.randn(512, C), w, b]
    yield "silu*b", lambda a, b: F.silu(a) * b, [torch.randn(300, 257), torch.randn(300, 257)]
    yield "cross_entropy", lambda z, t: F.cross_entropy(z, t), [
        torch.randn(128, 1000), torch.randint(0, 1000, (128,))]
    yield "rms_norm bf16", lambda x, w: (x.float() * torch.rsqrt(
        x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w, [
        torch.randn(256, 512).bfloat16(), torch.randn(512).bfloat16()]
    yield "softmax", lambda x: torch.softmax(x * 0.5, -1), [torch.randn(64, 333)]


@pytest.mark.parametrize("how", ["jit", "fused"])
@pytest.mark.parametrize("name,fn,inputs", list(_steps()), ids=[n for n, *_ in _steps()])
def test_training_step_on_the_gpu(name, fn, inputs, how):
    """Through jit as users call it (where nothing fuses, torch's calls and autograd), and
    with every region of the forward and backward fused."""
    def run(f):
        leaves = [t.cuda().requires_grad_(t.is_floating_point()) for t in inputs]
        out = f(*leaves)
        out.float().pow(2).mean().backward()
        return out, [t.grad for t in leaves if t.requires_grad]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jfn = primtrace.jit(fn) if how == "jit" else fused(fn)
        expected, expected_grads = run(fn)
        for _ in range(2):   # the second call runs the cached fused forward and backward
            got, grads = run(jfn)
    tol = dict(rtol=2e-2, atol=2e-2) if inputs[0].dtype == torch.bfloat16 else dict(
        rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got, expected, **tol)
    for g, e in zip(grads, expected_grads):
        torch.testing.assert_close(g, e, **tol)
    if how == "fused":
        assert fused_nodes(primtrace.last_trace(jfn))


def test_a_dynamic_trace_on_the_gpu():
    """One symbolic trace over batch sizes on CUDA tensors (factories and arange of the
    size, a norm, a training step): eager's values and grads at every size."""
    def fn(x, w):
        n = x.shape[0]
        pos = torch.arange(n, device=x.device).unsqueeze(1).to(x.dtype) * 0.01
        h = F.layer_norm(x + pos + torch.zeros(n, 1, device=x.device), (x.shape[-1],), w)
        return F.gelu(h) * 2

    jfn = primtrace.jit(fn, dynamic=True)
    for n in (3, 1, 7, 300):
        x = torch.randn(n, 64, device="cuda", requires_grad=True)
        w = torch.randn(64, device="cuda", requires_grad=True)
        xe, we = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
        got, expected = jfn(x, w), fn(xe, we)
        torch.testing.assert_close(got, expected)
        got.square().mean().backward()
        expected.square().mean().backward()
        torch.testing.assert_close(x.grad, xe.grad)
        torch.testing.assert_close(w.grad, we.grad)
    assert len(jfn._dynamic.entries) == 1
