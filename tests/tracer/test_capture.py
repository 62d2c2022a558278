"""What the tracer captures: torch functions, methods, operators, factories, pytrees, in-place
ops and out=, opaque fallbacks, and the errors for code that cannot be traced."""
import warnings

import pytest
import torch
import torch.nn.functional as F

import primtrace
from primtrace import refs
from primtrace.tracer import DataDependentError, OpaqueOpWarning
from primtrace.tracer.opaque import reset_warnings


def same(got, expected):
    """Structure, dtype, shape and values of two results (floats to eager's ulp-level
    tolerance: a ref may round differently from eager's fused kernel, as in add's alpha)."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(got, torch.Tensor)
        assert (got.dtype, got.shape) == (expected.dtype, expected.shape)
        torch.testing.assert_close(got, expected, equal_nan=True)
    elif isinstance(expected, (tuple, list)):
        assert type(got) is type(expected) and len(got) == len(expected)
        for g, e in zip(got, expected):
            same(g, e)
    elif isinstance(expected, dict):
        assert type(got) is dict and list(got) == list(expected)
        for k in expected:
            same(got[k], expected[k])
    else:
        assert got == expected


def prim_names(trace):
    return [n.symbol.name for n in trace.nodes]


def test_torch_functions_methods_and_operators_become_refs_and_prims():
    def f(a, b):
        return torch.mul(a, 2) + b.sub(a) - 1 / b, 2 - a, a.true_divide(b)
    a, b = torch.randn(3, 4), torch.rand(4) + 1
    jfn = primtrace.jit(f)
    same(jfn(a, b), f(a, b))
    acquisition, prims_trace = primtrace.last_traces(jfn)[:2]
    assert all(n.symbol.kind == "ref" for n in acquisition.nodes)
    assert all(n.symbol.kind == "prim" for n in prims_trace.nodes)


def test_add_of_f16_and_f32_is_exactly_a_conversion_and_an_add():
    a, b = torch.randn(4, 5, dtype=torch.float16), torch.randn(4, 5)
    trace = primtrace.trace(torch.add, stage="prims")(a, b)
    assert prim_names(trace) == ["convert_element_type", "add"]
    assert trace.nodes[0].args == (trace.inputs[0], torch.float32)
    assert prim_names(primtrace.trace(torch.add, stage="prims")(b, b)) == ["add"]


def test_refs_called_directly_are_traced_too():
    def f(a, b):
        return refs.add(a, b, alpha=3) * torch.sub(b, 1)
    a, b = torch.randn(3), torch.randn(3)
    jfn = primtrace.jit(f)
    same(jfn(a, b), torch.add(a, b, alpha=3) * (b - 1))
    assert primtrace.last_traces(jfn)[0].nodes[0].symbol is refs.add


def test_jit_equals_the_refs_run_eagerly_bit_for_bit():
    # the same refs, the same prims, the same torch kernels: traced or not, same bits
    def with_torch(a, b, c):
        y = torch.exp(torch.sin(a) * b + 0.5).clamp(max=4)
        return torch.where(y > 1, y, torch.rsqrt(y.abs() + 1e-6)) + c, torch.add(a, b, alpha=3)

    def with_refs(a, b, c):
        y = refs.clamp(refs.exp(refs.add(refs.mul(refs.sin(a), b), 0.5)), max=4)
        z = refs.add(refs.where(refs.gt(y, 1), y, refs.rsqrt(refs.add(refs.abs(y), 1e-6))), c)
        return z, refs.add(a, b, alpha=3)
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(64, generator=g).half(), torch.randn(64, generator=g)
    c = torch.randint(-5, 5, (64,), dtype=torch.int32, generator=g)
    for got, expected in zip(primtrace.jit(with_torch)(a, b, c), with_refs(a, b, c)):
        assert got.dtype == expected.dtype
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_pytrees_in_and_out():
    def f(batch, scale, *, extra=None):
        x, (y, z) = batch["x"], batch["yz"]
        out = {"sum": x + y * scale, "pair": [z - x, None], "tag": "done"}
        if extra is not None:
            out["extra"] = extra * 2
        return out, scale
    batch = {"x": torch.randn(2, 3), "yz": (torch.randn(3), torch.randn(2, 3).double())}
    jfn = primtrace.jit(f)
    same(jfn(batch, 1.5), f(batch, 1.5))
    same(jfn(batch, 2.5, extra=torch.ones(2)), f(batch, 2.5, extra=torch.ones(2)))
    names = [p.name for p in primtrace.last_traces(jfn)[0].inputs]
    assert names == ["batch_x", "batch_yz_0", "batch_yz_1", "scale", "extra"]


def test_inplace_methods_mutate_the_callers_tensor_and_later_reads_see_it():
    def f(x, y):
        before = x * 1
        x.add_(y)
        x.mul_(2)
        x.clamp_(max=1.5)
        after = x + 0
        x -= 0.25
        return before, after, x
    x, y = torch.randn(6), torch.randn(6)
    ours, theirs = x.clone(), x.clone()
    jfn = primtrace.jit(f)
    result, expected = jfn(ours, y), f(theirs, y)
    same(result, expected)
    same(ours, theirs)                  # the caller's tensor was really mutated
    assert result[2] is ours            # and returned, as eager returns self
    prims_trace = primtrace.last_traces(jfn)[1]
    assert prim_names(prims_trace).count("copy_to") == 4


def test_inplace_returns_self_at_trace_time_as_eager():
    def f(x):
        y = x.mul_(3)
        assert y is x
        return y
    x = torch.ones(2)
    assert primtrace.jit(f)(x) is x and x.tolist() == [3.0, 3.0]


def test_inplace_on_an_intermediate_and_aliases_of_it():
    def f(a):
        t = a * 2
        alias = t
        t += 1
        return alias, a
    a = torch.randn(3)
    same(primtrace.jit(f)(a), f(a.clone()))


def test_out_keyword_writes_into_the_callers_tensor():
    def f(a, b, out):
        torch.add(a, b, out=out)
        return out * 2
    a, b = torch.randn(2, 3), torch.randn(3)
    ours, theirs = torch.empty(2, 3), torch.empty(2, 3)
    same(primtrace.jit(f)(a, b, ours), f(a, b, theirs))
    same(ours, theirs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        resized = torch.empty(0)
        primtrace.jit(f)(a, b, resized)
    assert resized.shape == (2, 3)


@pytest.mark.filterwarnings("ignore::primtrace.OpaqueOpWarning")
def test_an_opaque_inplace_torch_method_still_mutates():
    def f(x, y):
        x[0] = 5.0       # __setitem__ has no ref
        x.copy_(x * y)   # nor does copy_
        return x + 1
    x, y = torch.randn(3), torch.randn(3)
    ours, theirs = x.clone(), x.clone()
    same(primtrace.jit(f)(ours, y), f(theirs, y))
    same(ours, theirs)


def test_unsupported_torch_functions_run_as_opaque_nodes_with_one_warning():
    reset_warnings()

    def f(x):
        return torch.logcumsumexp(x * 2, dim=0) + 1
    x = torch.randn(5)
    jfn = primtrace.jit(f, dynamic=False)   # the shapes below are static
    with pytest.warns(OpaqueOpWarning, match="torch.logcumsumexp"):
        same(jfn(x), f(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jfn(torch.randn(7))              # a new compile: no second warning
        primtrace.jit(f)(x)
    node = [n for n in primtrace.last_trace(jfn).nodes if n.symbol.kind == "opaque"][0]
    assert node.symbol.qualname == "torch.logcumsumexp" and node.executor.name == "torch"
    assert node.outputs.shape == (7,) and node.outputs.dtype == torch.float32

    report = primtrace.explain(f, x)
    assert [name for name, _ in report.opaque] == ["torch.logcumsumexp"]
    assert report.opaque[0][1] == "return torch.logcumsumexp(x * 2, dim=0) + 1"
    assert "torch.logcumsumexp" in str(report)
    assert not primtrace.explain(lambda a: a * 2, x).opaque


@pytest.mark.filterwarnings("ignore::primtrace.OpaqueOpWarning")
def test_opaque_nodes_take_metadata_from_meta_tensors_and_keep_errors():
    def f(x):
        return x.reshape(2, 3).T, torch.max(x.view(3, 2), dim=1)
    x = torch.randn(6)
    result = primtrace.jit(f)(x)
    expected = f(x)
    same(result[0], expected[0])
    assert result[1].values.shape == (3,)  # torch.return_types keep their fields
    same(tuple(result[1]), tuple(expected[1]))
    with pytest.raises(RuntimeError, match="shape"):  # eager's error type and message
        primtrace.jit(lambda x: x.reshape(4, 4))(x)


@pytest.mark.filterwarnings("ignore::primtrace.OpaqueOpWarning")
def test_factories_run_on_every_call():
    def f(x):
        return torch.ones(3) + x, torch.zeros_like(x)
    jfn = primtrace.jit(f)
    x = torch.randn(3)
    first = jfn(x)
    first[0].zero_()
    first[1].fill_(7)
    second = jfn(x)
    same(second, f(x))  # not the tensors the first call returned
    assert second[0] is not first[0] and second[1] is not first[1]


def test_numbers_are_runtime_inputs():
    def f(x, s, n):
        return torch.add(x, s, alpha=1), x * n, s
    jfn = primtrace.jit(f)
    x = torch.randn(3)
    same(jfn(x, 2.5, 3), f(x, 2.5, 3))
    same(jfn(x, -1.5, 4), f(x, -1.5, 4))
    assert primtrace.cache_info(jfn).hits == 1


@pytest.mark.filterwarnings("ignore::primtrace.OpaqueOpWarning")
def test_numbers_torch_refuses_as_proxies_become_constants():
    def f(x, k):
        return torch.roll(x, k)  # roll's shifts must be a real int
    jfn = primtrace.jit(f)
    x = torch.arange(5.0)
    same(jfn(x, 1), f(x, 1))
    same(jfn(x, 2), f(x, 2))  # the value is in the key now: a second compile
    same(jfn(x, 1), f(x, 1))
    assert (primtrace.cache_info(jfn).hits, primtrace.cache_info(jfn).misses) == (1, 2)


def test_nn_functional_and_special_map_to_their_refs():
    def f(x):
        return F.relu(x) + torch.special.expit(x)
    x = torch.randn(4)
    jfn = primtrace.jit(f)
    torch.testing.assert_close(jfn(x), f(x))
    assert all(n.symbol.kind == "ref" for n in primtrace.last_traces(jfn)[0].nodes)


@pytest.mark.parametrize("body, what", [
    (lambda t: t * 2 if t.sum() > 0 else t, "bool(tensor)"),
    (lambda t: t * 2 if t.max().item() > 0 else t, "item()"),
    (lambda t: t * int(t[0]), "int(tensor)"),
])
@pytest.mark.filterwarnings("ignore::primtrace.OpaqueOpWarning")
def test_data_dependent_control_flow_names_the_users_line(body, what):
    with pytest.raises(DataDependentError) as info:
        primtrace.jit(body)(torch.randn(3))
    message = str(info.value)
    assert what in message
    assert __file__ in message and "lambda t:" in message


def test_metadata_queries_are_answered_at_trace_time():
    def f(x):
        if x.is_floating_point() and x.dim() == 2 and x.shape[0] == 2 and x.numel() == 6:
            return x * 2
        return x
    x = torch.randn(2, 3)
    jfn = primtrace.jit(f)
    same(jfn(x), x * 2)
    assert prim_names(primtrace.last_trace(jfn)) == ["mul"]


def test_trace_time_metadata_equals_runtime_metadata():
    def f(a, b, c):
        return (a * b + c).half(), a.t() + 1, c > 0
    a, b, c = torch.randn(3, 4), torch.randn(4).double(), torch.randn(1, 4, dtype=torch.float16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        jfn = primtrace.jit(f)
        results = jfn(a, b, c)
    traced = primtrace.last_trace(jfn).outputs
    for got, proxy in zip(results, traced):
        assert (got.dtype, tuple(got.shape), got.device) == (proxy.dtype, tuple(proxy.shape),
                                                             proxy.device)


def test_a_jitted_function_called_while_tracing_is_inlined():
    inner = primtrace.jit(lambda x: x * 2)
    outer = primtrace.jit(lambda x: inner(x) + 1)
    x = torch.randn(3)
    same(outer(x), x * 2 + 1)
    assert primtrace.cache_info(inner).misses == 0
    assert [n.symbol.name for n in primtrace.last_trace(outer).nodes] == ["mul", "add"]


def test_returned_constants_are_fresh_per_call_unless_the_user_owns_them():
    weights = torch.ones(2)

    def f(x):
        return x + 1, weights, weights * 3  # weights * 3 is computed while tracing
    jfn = primtrace.jit(f)
    first, second = jfn(torch.zeros(2)), jfn(torch.zeros(2))
    assert first[1] is weights and second[1] is weights  # eager returns the same object
    assert first[2] is not second[2]                     # eager makes a new tensor per call
    same(second, f(torch.zeros(2)))


def test_the_stages_of_a_compile_and_trace_without_running():
    def f(x):
        x.add_(1)
        return x * 2
    x = torch.zeros(3)
    traces = primtrace.trace(f)(x), primtrace.trace(f, stage="execution")(x)
    assert x.tolist() == [0.0, 0.0, 0.0]  # traced, not run
    assert [t.stage for t in traces] == ["acquisition", "execution"]
    jfn = primtrace.jit(f)
    jfn(x)
    assert x.tolist() == [1.0, 1.0, 1.0]
    stages = primtrace.last_traces(jfn)
    assert [t.stage for t in stages] == ["acquisition", "prims", "optimized", "execution"]
    assert primtrace.last_trace(jfn) is stages[-1]
    with pytest.raises(ValueError):
        primtrace.trace(f, stage="fused")
    with pytest.raises(RuntimeError, match="not been compiled"):
        primtrace.last_traces(primtrace.jit(f))


def test_refs_added_later_are_picked_up_and_factories_record_their_prims(monkeypatch):
    from primtrace.refs.core import ref

    @ref(name="ones")
    def ones(*size, dtype=None, device=None):
        shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else size
        return primtrace.prims.full(shape, 1, dtype=dtype or torch.get_default_dtype(),
                                    device=device or "cpu")
    monkeypatch.setattr(refs, "ones", ones, raising=False)
    jfn = primtrace.jit(lambda x: torch.ones(2, 3) + x)
    x = torch.randn(3)
    same(jfn(x), torch.ones(2, 3) + x)
    acquisition, prims_trace = primtrace.last_traces(jfn)[:2]
    assert acquisition.nodes[0].symbol is ones
    assert [n.symbol.name for n in prims_trace.nodes[:1]] == ["full"]
    first = jfn(x)
    first.zero_()
    same(jfn(x), torch.ones(2, 3) + x)  # made on every call


def test_proxies_pass_tensor_type_checks_as_library_code_expects():
    """Library code branches on isinstance/is_tensor: a proxy must take the tensor branch
    (it failed both checks once, and silently took the other branch)."""
    def f(x, y):
        a = x * 2 if isinstance(x, torch.Tensor) else x
        b = a + 1 if torch.is_tensor(a) else a
        c = y if not isinstance(y, torch.Tensor) else y - 1
        return b, c
    x, y = torch.randn(3), torch.randn(3)
    same(primtrace.jit(f)(x, y), f(x, y))


@pytest.mark.parametrize("method, args", [
    ("cfloat", ()), ("cdouble", ()), ("add", (1.5,)), ("mul_", (2,)), ("abs", ()),
    ("clamp", (-0.5, 0.5)), ("__add__", (1,)), ("__rsub__", (1,)), ("to", (torch.float64,)),
])
def test_unbound_tensor_methods_trace_like_bound_ones(method, args):
    """torch.Tensor.<method>(x, ...) is the same call as x.<method>(...)."""
    def unbound(x):
        return getattr(torch.Tensor, method)(x, *args)

    def bound(x):
        return getattr(x, method)(*args)
    x = torch.randn(4)
    got = primtrace.jit(unbound)(x.clone())
    same(got, bound(x.clone()))
    assert prim_names(primtrace.trace(unbound, stage="prims")(x)) == \
        prim_names(primtrace.trace(bound, stage="prims")(x))
