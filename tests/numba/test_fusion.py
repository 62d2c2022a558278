"""The Numba fusion executor on CPU: regions, kernels, layouts, scalars, in-place writes."""
import math

import pytest
import torch

import primtrace
from primtrace.executors.numba import NumbaFusionExecutor, kernel_sources
from primtrace.executors.numba.backends import cpu
from tests.numba.helpers import check_against_eager, execution, fused, fused_nodes, torch_nodes


def w2(a, b, c):
    y = torch.exp(torch.sin(a) * b + 0.5).clamp(max=4)
    return torch.where(y > 1, y, torch.rsqrt(y.abs() + 1e-6)) + c


def _w2_inputs(n=257):
    g = torch.Generator().manual_seed(1)
    return (torch.randn(n, generator=g).half(), torch.randn(n, generator=g),
            torch.randint(-3, 4, (n,), generator=g, dtype=torch.int32))


def test_mixed_dtype_add_is_one_kernel_with_the_conversion_in_registers():
    jf = fused(torch.add)
    a, b = torch.randn(100).half(), torch.randn(100)
    got = jf(a, b)
    assert torch.equal(got, torch.add(a, b))
    tr = execution(jf)
    assert len(fused_nodes(tr)) == 1 and not torch_nodes(tr)
    source = fused_nodes(tr)[0].symbol.impl.source
    assert "m.f16_to_f32(in0[i0])" in source       # f16 read as bits, converted where used


def test_w2_chain_is_one_region_and_conforms():
    jf = fused(w2)
    check_against_eager(jf, w2, *_w2_inputs())
    tr = execution(jf)
    (node,) = fused_nodes(tr)
    assert len(node.subnodes) >= 11 and not torch_nodes(tr)
    assert str(tr).count("numba_fusion_0(a, b, c)") == 1     # one call, prims nested under it
    sources = kernel_sources(tr)
    assert list(sources) == ["numba_fusion_0"] and "def kernel_serial" in sources["numba_fusion_0"]


def test_python_numbers_and_constants_are_kernel_arguments():
    def f(x, s):
        return x * s + 2.5

    def g(x, s):
        return x * s + 7.25     # another constant: same kernel, another argument value

    x = torch.randn(64)
    jf, jg = fused(f), fused(g)
    for s in (2.0, 3.0):
        check_against_eager(jf, f, x, s)
    check_against_eager(jg, g, x, 3.0)
    kernels = {fused_nodes(execution(j))[0].symbol.impl.kernel for j in (jf, jg)}
    assert len(kernels) == 1                    # one compiled kernel for all three
    assert primtrace.cache_info(jf).misses == 1  # the number's value is not in the key


def test_zero_dim_cpu_tensor_is_a_scalar_argument():
    def f(x, y):
        return x + y
    jf = fused(f)
    x = torch.randn(5, 3)
    check_against_eager(jf, f, x, torch.tensor(1.5, dtype=torch.float64))
    impl = fused_nodes(execution(jf))[0].symbol.impl
    assert ".item()" in impl.source and [ld.proxy.name for ld in impl.plan.loads] == ["x"]
    assert [s.input for s in impl.plan.scalars if s.input is not None] == [
        [p.name for p in fused_nodes(execution(jf))[0].args].index("y")]


def test_broadcast_and_strided_inputs_are_read_in_place():
    def f(a, b, c):
        return a * b + c
    a = torch.randn(3, 1)
    b = torch.randn(1, 4)
    c = torch.randn(4, 3).t()                   # non-contiguous
    jf = fused(f)
    check_against_eager(jf, f, a, b, c)
    tr = execution(jf)
    assert not torch_nodes(tr)                  # no expand/contiguous copies anywhere
    plan = fused_nodes(tr)[0].symbol.impl.plan
    strides = {ld.proxy.name: ld.strides for ld in plan.loads}
    assert 0 in strides["a"] and 0 in strides["b"]


def test_contiguous_dimensions_are_coalesced():
    def f(a, b):
        return a + b
    jf = fused(f)
    jf(torch.randn(4, 8, 16), torch.randn(4, 8, 16))
    assert fused_nodes(execution(jf))[0].symbol.impl.plan.sizes == (512,)
    jf(torch.randn(4, 8, 16), torch.randn(8, 16))     # broadcast over dim 0 only
    assert fused_nodes(execution(jf))[0].symbol.impl.plan.sizes == (4, 128)
    x = torch.randn(6, 10)[:, ::2]                  # uniformly strided: still one dim
    check_against_eager(jf, f, x, x)
    plan = fused_nodes(execution(jf))[0].symbol.impl.plan
    assert plan.sizes == (30,) and plan.loads[0].strides == (2,)
    x = torch.randn(6, 11)[:, ::2]
    check_against_eager(jf, f, x, x)
    assert fused_nodes(execution(jf))[0].symbol.impl.plan.sizes == (6, 6)


def test_new_outputs_keep_the_inputs_memory_format():
    def f(x, y):
        return torch.sigmoid(x) * y
    x = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    y = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    jf = fused(f)
    out = check_against_eager(jf, f, x, y)
    assert out.is_contiguous(memory_format=torch.channels_last)
    assert fused_nodes(execution(jf))[0].symbol.impl.plan.sizes == (120,)


@pytest.mark.parametrize("parallel", [False, True])
def test_integer_division_by_zero_raises_like_eager(parallel, monkeypatch):
    monkeypatch.setattr(cpu, "PARALLEL_WORK", 0 if parallel else 1 << 62)
    monkeypatch.setattr(cpu, "MIN_PARALLEL_ELEMENTS", 0)

    def f(a, b):
        return torch.div(a, b, rounding_mode="floor") + a % b
    jf = fused(f)
    a = torch.randint(-50, 50, (4, 33), dtype=torch.int32)
    b = torch.randint(1, 5, (33,), dtype=torch.int32)
    check_against_eager(jf, f, a, b)
    assert fused_nodes(execution(jf))[0].symbol.impl.variant == (
        "kernel_parallel" if parallel else "kernel_serial")
    b[7] = 0
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        f(a, b)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        jf(a, b)
    assert torch.equal(jf(a[:0], b), f(a[:0], b))   # nothing computed, nothing raised


def test_in_place_update_writes_into_the_input():
    def f(x, y):
        x.mul_(2).add_(y, alpha=0.5)
        return x
    x, y = torch.randn(8, 16), torch.randn(16)
    expected = f(x.clone(), y)
    jf = fused(f)
    ptr = x.data_ptr()
    out = jf(x, y)
    assert out is x and x.data_ptr() == ptr
    torch.testing.assert_close(x, expected)
    tr = execution(jf)
    assert len(fused_nodes(tr)) == 1 and not torch_nodes(tr)
    assert "io0[" in fused_nodes(tr)[0].symbol.impl.source or "in0[" in fused_nodes(tr)[0].symbol.impl.source


def adamw_step(p, g, m, v, lr, beta1, beta2, eps, weight_decay, step):
    p.mul_(1 - lr * weight_decay)
    m.lerp_(g, 1 - beta1)
    v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
    denom = (v.sqrt() / math.sqrt(1 - beta2 ** step)).add_(eps)
    p.addcdiv_(m, denom, value=-lr / (1 - beta1 ** step))


def test_adamw_step_is_one_in_place_kernel():
    gen = torch.Generator().manual_seed(0)
    state = [torch.randn(300, generator=gen) for _ in range(4)]
    state[3] = state[3].abs()
    hyper = (1e-3, 0.9, 0.999, 1e-8, 1e-2, 3)
    ours = [t.clone() for t in state]
    adamw_step(*state, *hyper)
    jf = fused(adamw_step)
    jf(*ours, *hyper)
    for a, b in zip(ours, state):
        torch.testing.assert_close(a, b)
    tr = execution(jf)
    assert len(fused_nodes(tr)) == 1 and not torch_nodes(tr)
    node = fused_nodes(tr)[0]
    plan = node.symbol.impl.plan
    assert sorted(node.args[s.into_input].name for s in plan.stores) == ["m", "p", "v"]
    assert all(s.shares is not None for s in plan.stores)             # read and written once


def test_parallel_blocked_loop_matches_serial(monkeypatch):
    def f(a, b):
        return torch.exp(a) - b * 2
    a = torch.randn(3, 5000)[:, ::2]              # two dims, a few long rows
    b = torch.randn(2500)
    serial = fused(f)(a, b)
    monkeypatch.setattr(cpu, "PARALLEL_WORK", 0)
    monkeypatch.setattr(cpu, "MIN_PARALLEL_ELEMENTS", 0)
    jf = fused(f)
    parallel = check_against_eager(jf, f, a, b)
    impl = fused_nodes(execution(jf))[0].symbol.impl
    assert impl.variant == "kernel_parallel" and impl.plan.sizes == (3, 2500)
    assert torch.equal(serial, parallel)


def test_empty_and_zero_dim_tensors():
    def f(a, b):
        return torch.sin(a) * b
    jf = fused(f)
    check_against_eager(jf, f, torch.randn(0, 3), torch.randn(3))
    out = check_against_eager(jf, f, torch.tensor(0.5), torch.tensor(2.0))
    assert out.shape == ()


def test_values_used_outside_are_extra_outputs():
    def f(a, b):
        s = a + b
        return s * 2, torch.special.zeta(s, 2.0 + s)   # zeta has no Numba lowering
    a, b = torch.rand(10) + 1, torch.rand(10) + 1
    jf = fused(f)
    check_against_eager(jf, f, a, b)
    tr = execution(jf)
    names = [n.symbol.name for n in tr.nodes]
    assert any("zeta" in n for n in names)                 # ran by torch, in between
    assert all(len(n.outputs) >= 1 for n in fused_nodes(tr))


def test_unsupported_prims_split_regions_and_run_in_torch():
    def f(a, b):
        x = a.sin() + 1
        y = torch.special.zeta(x, 3.0)           # special function: torch runs it
        z = (a.to(torch.complex64) * 2).real      # complex: torch runs it
        return y * b + z
    a, b = torch.rand(6) + 1, torch.randn(6)
    jf = fused(f)
    check_against_eager(jf, f, a, b)
    tr = execution(jf)
    assert len(fused_nodes(tr)) >= 2 and torch_nodes(tr)


def test_regions_merge_across_non_consecutive_nodes_without_cycles():
    def f(a, b):
        x = a * 2                                   # fusible
        y = torch.special.zeta(x, 2.5)              # not fusible, needs x
        z = x + 1                                   # fusible, after y in program order
        w = b.cos()                                 # independent
        return y + z, w * z
    a, b = torch.rand(7) + 1, torch.randn(7)
    jf = fused(f)
    check_against_eager(jf, f, a, b)
    regions = [n.subnodes for n in fused_nodes(execution(jf))]
    names = [{s.symbol.name for s in r} for r in regions]
    # x, z, cos and w*z fuse (z is not next to x in the trace); y + z needs zeta: another one
    assert any({"mul", "add", "cos"} <= r for r in names)
    assert len(regions) == 2


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_stores_round_to_nearest_even_with_specials(dtype):
    def f(x):
        return (x * 1.0).to(dtype)
    vals = torch.tensor([math.nan, math.inf, -math.inf, 65519.99, 65520.0, 1e-8, -3e-8,
                         1 + 2 ** -11, 1 + 3 * 2 ** -11, -0.0, 3.3895e38, 1e-40])
    jf = fused(lambda x: (x * 1.0).to(dtype))
    got = jf(vals)
    want = f(vals)
    assert torch.equal(got.view(torch.int16)[1:], want.view(torch.int16)[1:]) and got[0].isnan()


def test_float_to_int_conversions_match_eager_specials():
    def f(x):
        return (x + 0).to(torch.int8), (x + 0).to(torch.int32), (x + 0).to(torch.int64), (x + 0).to(torch.uint8)
    x = torch.tensor([math.nan, math.inf, -math.inf, 3e9, -3e9, 1e20, -0.5, 300.7, -129.5, 2.0 ** 31])
    jf = fused(f)
    for got, want in zip(jf(x), f(x)):
        assert torch.equal(got, want)


def test_inputs_requiring_grad_fuse_forward_and_backward():
    def f(x):
        return torch.sin(x) * 2
    x = torch.randn(5, requires_grad=True)
    jf = fused(f)
    out = jf(x)
    assert out.grad_fn is not None and fused_nodes(execution(jf))
    out.sum().backward()
    torch.testing.assert_close(x.grad, 2 * torch.cos(x.detach()))
    with torch.no_grad():
        jf(x)
    assert fused_nodes(execution(jf))


def test_float64_to_float16_rounds_twice_like_torch():
    """torch converts f64 -> f32 -> f16; LLVM must not fold that into one rounding (it did,
    and emitted a libcall Numba cannot resolve: a crash)."""
    def f(a, o):
        return torch.add(a, 0.0, out=o)
    a = torch.tensor([1 + 2 ** -11 + 2 ** -40, -(1 + 2 ** -11 + 2 ** -40), 65519.999, 3e-8],
                     dtype=torch.float64)
    jf = fused(f)
    got = jf(a, torch.empty(4, dtype=torch.float16))
    assert torch.equal(got, f(a, torch.empty(4, dtype=torch.float16)))
    assert fused_nodes(execution(jf))
    x = torch.tensor(0.7, dtype=torch.float16)      # hoisted: all values are scalars
    assert torch.equal(fused(torch.special.erf)(x), torch.special.erf(x))


def test_kernel_source_is_public_and_on_the_fused_node():
    import primtrace
    jf = primtrace.jit(lambda a, b: torch.sin(a) * b + 1)
    jf(torch.randn(8), torch.randn(8))
    source = primtrace.kernel_source(jf)
    assert source.startswith("# numba_fusion_0") and "def kernel_serial" in source
    (node,) = [n for n in primtrace.last_trace(jf).nodes if n.symbol.kind == "fused"]
    assert node.symbol.source in source


def test_fewer_elements_than_torchs_grain_run_on_one_thread(monkeypatch):
    """Below torch's GRAIN_SIZE eager's loops run serially; a parallel kernel there waits at
    its barrier whenever another process holds a core (12 ms for a 10 us kernel)."""
    from primtrace.executors.numba.backends import threads as nthreading
    monkeypatch.setattr(cpu, "PARALLEL_WORK", 0)
    for numel, want in [(cpu.MIN_PARALLEL_ELEMENTS // 2, "kernel_serial"),
                        (cpu.MIN_PARALLEL_ELEMENTS, "kernel_parallel")]:
        jf = fused(lambda a: torch.tanh(a) * 2)
        a = torch.randn(numel)
        check_against_eager(jf, lambda a: torch.tanh(a) * 2, a)
        if want == "kernel_parallel" and nthreading.num_threads() <= 1:
            want = "kernel_serial"
        assert fused_nodes(execution(jf))[0].symbol.impl.variant == want


@pytest.mark.parametrize("shape, dims", [((300, 200), (1, 0)), ((3, 70, 130), (2, 0, 1)),
                                         ((5, 129, 65), (0, 2, 1))])
def test_operands_strided_along_the_inner_dim_run_in_tiles(shape, dims, monkeypatch):
    """A permuted operand makes the kernel walk tiles of TILE_ROWS x TILE_COLS (ragged edges
    included), serial and parallel, with eager's values and layout."""
    from primtrace.executors.numba.backends import threads as nthreading

    def f(a, b):
        return a.permute(*dims) * 2 + b
    a = torch.randn(shape)
    b = torch.randn(a.permute(*dims).shape)
    for parallel in (False, True):
        monkeypatch.setattr(cpu, "PARALLEL_WORK", 0 if parallel else 1 << 62)
        monkeypatch.setattr(cpu, "MIN_PARALLEL_ELEMENTS", 0)
        jf = fused(f)
        out = check_against_eager(jf, f, a, b)
        assert out.stride() == f(a, b).stride()
        impl = fused_nodes(execution(jf))[0].symbol.impl
        assert cpu.tiled(impl.plan)
        if parallel and nthreading.num_threads() > 1:
            assert impl.variant == "kernel_parallel"


@pytest.mark.parametrize("numel", [5000, 40_000, 100_003])
def test_big_new_outputs_are_faulted_in_by_each_task_ahead_of_its_stores(numel, monkeypatch):
    """From POPULATE_BYTES, each task madvises its part of a new output in (whole pages
    only, ragged ends left to the stores); outputs written in place are not touched."""
    import sys
    monkeypatch.setattr(cpu, "POPULATE_BYTES", 4096)
    monkeypatch.setattr(cpu, "MIN_PARALLEL_ELEMENTS", 0)

    def f(a, b):
        return torch.tanh(a) * b, (a > 0)
    a, b = torch.randn(numel), torch.randn(numel)
    for parallel in (False, True):
        monkeypatch.setattr(cpu, "PARALLEL_WORK", 0 if parallel else 1 << 62)
        jf = fused(f)
        check_against_eager(jf, f, a, b)
        source = primtrace.kernel_source(jf)
        if sys.platform.startswith("linux"):
            assert "rt.populate(out0_addr + first * 4" in source
            assert "rt.populate(out1_addr + first * 1" in source
    inplace = fused(lambda a: a.mul_(2).add_(1))
    want = a * 2 + 1
    inplace(a)
    assert torch.equal(a, want) and "rt.populate" not in primtrace.kernel_source(inplace)
    monkeypatch.setattr(cpu, "POPULATE_BYTES", 1 << 40)
    jf = fused(f)
    jf(a, b)
    assert "rt.populate" not in primtrace.kernel_source(jf)


@pytest.mark.parametrize("program", [
    lambda a: ((a + 1).mul_(2), a)[1],                 # an in-place op on a temporary
    lambda a: (a.t().contiguous().mul_(2), a)[1],
    lambda a: ((a + 1).mul_(2), a.sin())[1],         # beside work that is returned
    lambda a: (a.sum(1).mul_(2), a)[1],
])
def test_a_region_nothing_observes_compiles_to_no_kernel(program):
    check_against_eager(fused(program), program, torch.randn(3, 4))   # no empty loop emitted
