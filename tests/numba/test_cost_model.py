"""When the Numba executor leaves a region to torch: one torch call whose kernel would not
beat torch's own runs as that call (values exactly eager's); everything that saves a
memory pass, mixes dtypes, writes a huge-page-sized output or computes faster math fuses."""
import pytest
import torch
import torch.nn.functional as F

import primtrace
from primtrace.executors.numba import NumbaFusionExecutor, cost
from primtrace.executors.numba.backends import cpu


def run(fn, *args, **kw):
    jfn = primtrace.jit(fn, executors=[NumbaFusionExecutor(**kw)])
    got = jfn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    return got, [n.symbol.qualname for n in primtrace.last_trace(jfn).nodes]


@pytest.mark.parametrize("fn, dtype, call", [
    (lambda a: a * 1.5, torch.float16, "torch.Tensor.mul"),
    (lambda a: a * 1.5, torch.bfloat16, "torch.Tensor.mul"),
    (F.gelu, torch.float32, "torch.nn.functional.gelu"),
    (torch.sigmoid, torch.float32, "torch.sigmoid"),
    (lambda a: torch.clamp(a, -1, 1), torch.float32, "torch.clamp"),
    (lambda a: a.add_(1), torch.float32, "torch.Tensor.add_"),
    (F.silu, torch.float32, "torch.nn.functional.silu"),       # faster math, eager still wins
])
def test_one_torch_call_below_the_huge_page_size_runs_as_that_call(fn, dtype, call):
    a = torch.randn(4096).to(dtype)
    got, nodes = run(fn, a)
    assert nodes == [call]
    torch.testing.assert_close(got, fn(a.clone()), rtol=0, atol=0)   # torch's own kernel


@pytest.mark.parametrize("fn, args", [
    (lambda a, b: a + b, (torch.randn(64).half(), torch.randn(64))),            # two dtypes
    (lambda a, b: F.gelu(a + b), (torch.randn(64), torch.randn(64))),          # two calls
    (torch.exp, (torch.randn(64),)),                                           # faster math
])
def test_what_saves_work_still_fuses(fn, args):
    got, nodes = run(fn, *args)
    assert nodes == ["numba_fusion_0"]
    torch.testing.assert_close(got, fn(*args))


def test_a_huge_page_sized_call_fuses_only_with_huge_pages(monkeypatch):
    """A single float32 call with an 8 MiB output wins only by faulting its output in as
    huge pages: off by default (PRIMTRACE_HUGE_PAGES=1), it runs as eager's call."""
    a = torch.randn(cpu.HUGE_OUTPUT_BYTES // 4)
    monkeypatch.setattr(cpu, "HUGE_PAGES", False)   # the default, whatever the environment
    got, nodes = run(lambda a: a * 1.5, a)
    assert nodes == ["torch.Tensor.mul"]
    torch.testing.assert_close(got, a * 1.5, rtol=0, atol=0)
    monkeypatch.setattr(cpu, "HUGE_PAGES", True)
    got, nodes = run(lambda a: a * 1.5, a)
    assert nodes == ["numba_fusion_0"]
    torch.testing.assert_close(got, a * 1.5)


@pytest.mark.parametrize("fn, dtype", [
    (torch.exp, torch.float16), (torch.exp2, torch.bfloat16), (F.gelu, torch.bfloat16),
    (torch.sigmoid, torch.float16), (F.silu, torch.bfloat16),
])
def test_half_math_eager_computes_faster_runs_in_torch(fn, dtype):
    a = torch.randn(cost.MIN_HALF_ELEMENTS).to(dtype)
    got, nodes = run(fn, a)
    assert len(nodes) == 1 and not nodes[0].startswith("numba_fusion")
    torch.testing.assert_close(got, fn(a), rtol=0, atol=0)


@pytest.mark.parametrize("fn", [lambda a: a * 1.5, torch.relu, F.gelu, torch.tanh, torch.sin, torch.cos])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_calls_fuse_from_the_break_even_size(fn, dtype):
    if fn is F.gelu and dtype is torch.bfloat16:
        pytest.skip("bf16 erf: eager's is faster")
    small, big = (torch.randn(n).to(dtype) for n in (cost.MIN_HALF_ELEMENTS // 2,
                                                        cost.MIN_HALF_ELEMENTS))
    assert run(fn, small)[1] != ["numba_fusion_0"]
    got, nodes = run(fn, big)
    assert nodes == ["numba_fusion_0"]
    torch.testing.assert_close(got, fn(big))


def test_without_the_cost_model_every_region_fuses():
    got, nodes = run(lambda a: a * 1.5, torch.randn(64).half(), cost_model=False)
    assert nodes == ["numba_fusion_0"]


@pytest.mark.parametrize("fn", [torch.fmod, torch.remainder, torch.hypot])
def test_prims_slower_in_our_kernels_are_not_fused_even_in_a_chain(fn):
    a, b = torch.randn(256), torch.rand(256) + 0.5
    got, nodes = run(lambda a, b: fn(a * 2, b) + 1, a, b)
    assert any(fn.__name__ in n for n in nodes), nodes   # run by torch, not in a kernel
    torch.testing.assert_close(got, fn(a * 2, b) + 1)
    assert run(lambda a, b: fn(a * 2, b) + 1, a, b, cost_model=False)[1] == ["numba_fusion_0"]


def test_a_call_with_a_prim_left_to_torch_runs_whole():
    """floor_divide's float ref holds fmod (slow in our kernels): the call runs as itself,
    not as its twenty other prims in kernels and torch around one fmod."""
    a, b = torch.randn(4096), torch.rand(4096) + 0.5
    got, nodes = run(lambda a, b: torch.floor_divide(a * 2, b) + 1, a, b)
    assert "torch.floor_divide" in nodes
    torch.testing.assert_close(got, torch.floor_divide(a * 2, b) + 1, rtol=0, atol=0)


def test_cross_entropy_fuses_around_its_gather():
    """W9's pattern: the logit at each target is gathered in torch (one per row), the row
    kernel computes the loss per row; the call is not left whole to torch."""
    x, t = torch.randn(64, 1024), torch.randint(0, 1024, (64,))
    got, nodes = run(F.cross_entropy, x, t)
    assert "prims.gather" in nodes and "torch.nn.functional.cross_entropy" not in nodes, nodes
    torch.testing.assert_close(got, F.cross_entropy(x, t))


def test_bfloat16_gelu_stays_eagers_call_in_a_chain():
    a, b = (torch.randn(1 << 16).bfloat16() for _ in range(2))
    got, nodes = run(lambda a, b: F.gelu(a + b), a, b)
    assert nodes == ["numba_fusion_0", "torch.nn.functional.gelu_"]   # into a + b's buffer
    torch.testing.assert_close(got, F.gelu(a + b), rtol=0, atol=0)
    assert run(lambda a, b: F.gelu(a + b), a.half(), b.half())[1] == ["numba_fusion_0"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_a_call_reading_a_transposed_operand_fuses_from_the_tiled_size(dtype):
    """a.t() + b: eager's own loop below cost.TILED_MIN_ELEMENTS, the tiled kernel from it."""
    def f(a, b):
        return a.t() + b
    for n, fuses in [(256, False), (1024, True)]:
        assert n * n < cost.TILED_MIN_ELEMENTS or fuses
        a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
        got, nodes = run(f, a, b)
        assert any(n.startswith("numba_fusion") for n in nodes) == fuses, nodes
        assert got.stride() == f(a, b).stride()
        torch.testing.assert_close(got, f(a, b), rtol=0, atol=0)


def test_a_channels_last_call_is_not_a_transposed_one():
    """The loop walks the output's unit-stride dim: a channels-last operand of a channels-last
    result is read contiguously, so its float32 call runs as eager's (arithmetic is a wash)."""
    x = torch.randn(4, 64, 64, 64).to(memory_format=torch.channels_last)
    assert x.numel() >= cost.TILED_MIN_ELEMENTS
    got, nodes = run(lambda x: x * 1.5, x)
    assert nodes == ["torch.Tensor.mul"], nodes
    assert got.stride() == (x * 1.5).stride()


def test_a_call_kept_whole_after_cse_merged_its_prims_into_another_call():
    """l1_loss's sub is CSE'd into mse_loss's: kept whole, l1_loss reads a and b again, and
    the region holding that sub need not output it (was a LoweringError). l1_loss is kept
    whole by its reduction: one row of 8192 elements (a row kernel would not split it
    among threads, cost.reductions_fuse)."""
    a, b = torch.randn(64, 128), torch.randn(64, 128)

    def fn(a, b):
        return F.mse_loss(a, b, reduction="none") + F.l1_loss(a, b, reduction="sum")
    got, nodes = run(fn, a, b)
    assert "torch.nn.functional.l1_loss" in nodes
    torch.testing.assert_close(got, fn(a, b))


def test_linears_sharing_a_cse_merged_input_conversion_all_run_whole():
    """Three bfloat16 linears with biases on one normalized input (q, k, v): CSE shares the
    float32 copy of the input their prims make, which belongs to the first call's prims. The
    first ran as a float32 matmul of weights converted on every call (1.35x eager at
    256 x 512); all three now run as eager's linear."""
    def fn(x, w, b, w2, b2, w3, b3):
        h = x.float()
        h = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16)
        return F.linear(h, w, b).view(1, -1, 4, 8), F.linear(h, w2, b2), F.linear(h, w3, b3)
    x = torch.randn(1, 16, 32).bfloat16()
    params = [torch.randn(32, 32).bfloat16() if i % 2 == 0 else torch.randn(32).bfloat16()
              for i in range(6)]
    got, nodes = run(fn, x, *params)
    assert nodes.count("torch.nn.functional.linear") == 3 and "prims.matmul" not in nodes, nodes
    for g, e in zip(got, fn(x, *params)):
        torch.testing.assert_close(g, e, rtol=0, atol=0)


def test_the_gpu_rule_fuses_only_large_float_elementwise_prims():
    """cost.fuse_on_gpu (measured on an H100 and an H200): reductions never, half dtypes never, float32
    elementwise prims from 2^26 elements (the proxies' device does not matter to the rule)."""
    from primtrace.executors.numba import cost

    def prims_of(fn, *args):
        return [n for n in primtrace.trace(fn, stage="prims")(*args).nodes
                if n.symbol.kind == "prim"]
    big, small = torch.empty(cost.CUDA_MIN_ELEMENTS), torch.empty(1 << 20)
    assert all(cost.fuse_on_gpu(n) for n in prims_of(lambda a: 2 * a + 1, big))
    assert not any(cost.fuse_on_gpu(n) for n in prims_of(lambda a: 2 * a + 1, small))
    half = torch.empty(cost.CUDA_MIN_ELEMENTS, dtype=torch.bfloat16)   # its rounding back to
    assert not all(cost.fuse_on_gpu(n) for n in prims_of(lambda a: 2 * a + 1, half))  # bf16 refuses,
    # so fuse_call keeps the whole call in torch
    sums = [n for n in prims_of(lambda a: a.sum(-1), big.view(-1, 1024)) if n.symbol.name == "sum"]
    assert sums and not any(cost.fuse_on_gpu(n) for n in sums)


@pytest.mark.parametrize("dtype, numel, fuses", [
    (torch.float32, 1024, True),      # eager's fixed ~7 us a call
    (torch.float32, 4096, False),
    (torch.float64, 64, False),
    (torch.float64, 4096, True),      # eager's float64 gelu is scalar
    (torch.float64, 1 << 16, True),
])
def test_a_lone_gelu_fuses_where_eagers_kernel_is_slower(dtype, numel, fuses):
    a = torch.randn(numel, dtype=dtype)
    got, nodes = run(F.gelu, a)
    assert nodes == (["numba_fusion_0"] if fuses else ["torch.nn.functional.gelu"])
    torch.testing.assert_close(got, F.gelu(a))


def _attention(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def test_attention_runs_as_its_prims_where_eager_takes_its_math_path():
    """Falcon's multi-query attention with a mask: eager's sdpa runs matmul, the mask and
    softmax as separate calls (its math path); ours runs the same matmuls and one row kernel
    between them. Twice in one function, the second call's transposed key is the first's
    (CSE): it does not make the call run whole. Where eager picks its fused kernel (heads
    alike), the call runs whole."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 64, 32, generator=g)
    k, v = (torch.randn(1, 1, 64, 32, generator=g) for _ in range(2))
    mask = torch.ones(64, 64, dtype=torch.bool).tril()[None, None]

    def twice(q, k, v, mask):
        return _attention(q, k, v, mask), _attention(q * 2, k, v, mask)
    got, nodes = run(twice, q, k, v, mask)
    assert "torch.nn.functional.scaled_dot_product_attention" not in nodes, nodes
    assert nodes.count("prims.matmul") == 4
    for g_, e in zip(got, twice(q, k, v, mask)):
        torch.testing.assert_close(g_, e)
    _, nodes = run(_attention, q, q, q, mask)      # heads alike: eager's fused kernel
    assert nodes == ["torch.nn.functional.scaled_dot_product_attention"], nodes


def test_a_gelu_on_a_dying_linear_output_fuses_into_its_memory():
    """F.gelu after a Linear at 16K float32 elements: eager's own kernel beats ours on a
    fresh output, not where ours writes into the Linear's dead output (cost.GELU_INTO_DEAD);
    on an argument (nothing dies) it stays eager's call."""
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(64, 128, generator=g), torch.randn(256, 128, generator=g) * 0.1

    def mlp(x, w):
        return F.gelu(F.linear(x, w))
    with torch.no_grad():
        jfn = primtrace.jit(mlp, executors=[NumbaFusionExecutor()])
        got = jfn(x, w)
        nodes = primtrace.last_trace(jfn).nodes
    assert [n.symbol.qualname for n in nodes] == ["torch.nn.functional.linear", "numba_fusion_0"]
    assert "o0 = i0" in nodes[1].symbol.impl.launcher
    torch.testing.assert_close(got, mlp(x, w))
    _, names = run(F.gelu, torch.randn(64, 256, generator=g))
    assert names == ["torch.nn.functional.gelu"], names


def test_a_layer_norm_of_a_transposed_residual_stream_fuses():
    """Whisper's encoder: its conv stem leaves the residual stream transposed, so each
    residual add and layer_norm reads a tensor strided along the normalized dim. Eager's
    layer_norm reads a contiguous copy of it; the row kernels fuse the add and the norm
    (cost.COPYING_ROW_CALLS) instead of leaving both to torch."""
    g = torch.Generator().manual_seed(0)
    stem = torch.randn(1, 128, 100, generator=g)
    r, w, b = (torch.randn(100, 128, generator=g), torch.randn(128, generator=g),
               torch.randn(128, generator=g))

    def block(stem, r, w, b):
        h = stem.permute(0, 2, 1) + r
        return F.layer_norm(h, (128,), w, b), h
    got, nodes = run(block, stem, r, w, b)
    assert "torch.nn.functional.layer_norm" not in nodes, nodes
    assert all(n.startswith("numba_fusion") or n.startswith("torch.Tensor.permute")
               for n in nodes), nodes
    for g_, e in zip(got, block(stem, r, w, b)):
        torch.testing.assert_close(g_, e)
        assert g_.stride() == e.stride()


def test_a_lone_layer_norm_runs_in_torch_and_one_in_a_chain_fuses():
    """Eager's Welford layer_norm reads a row twice, our row kernel three times: alone it
    measured 1.1-2.0x eager (2026-11-29), so the call stays torch's; with a residual add
    before it the kernel saves a pass and fuses."""
    x, r, w, b = torch.randn(64, 128), torch.randn(64, 128), torch.randn(128), torch.randn(128)
    costed = [NumbaFusionExecutor(), primtrace.TORCH]
    alone = primtrace.jit(lambda x, w, b: F.layer_norm(x, (128,), w, b), executors=costed)
    chain = primtrace.jit(lambda x, r, w, b: F.layer_norm(x + r, (128,), w, b), executors=costed)
    torch.testing.assert_close(alone(x, w, b), F.layer_norm(x, (128,), w, b))
    torch.testing.assert_close(chain(x, r, w, b), F.layer_norm(x + r, (128,), w, b))
    assert "torch.nn.functional.layer_norm" in str(primtrace.last_trace(alone))
    assert "torch.nn.functional.layer_norm" not in str(primtrace.last_trace(chain))


def test_a_float64_copy_of_a_float32_value_is_never_stored_between_kernels():
    """A norm's exact mean sums float64 values of its float32 input; where the input comes
    out of another kernel (a roll's gather before it), that kernel must not also store the
    float64 copy (twice the bytes): the norm's kernel converts as it reads."""
    def f(x, r, w, b):
        h = torch.roll(x, 2, 1) + r
        return F.layer_norm(h, (96,), w, b) * 2, h
    x, r, w, b = torch.randn(8, 8, 96), torch.randn(8, 8, 96), torch.randn(96), torch.randn(96)
    jf = primtrace.jit(f, executors=[NumbaFusionExecutor(), primtrace.TORCH])
    torch.testing.assert_close(jf(x, r, w, b), f(x, r, w, b))
    stored = [p for n in primtrace.last_trace(jf).nodes for p in n.output_proxies]
    assert all(p.dtype is not torch.float64 for p in stored), stored
