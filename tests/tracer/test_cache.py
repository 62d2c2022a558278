"""The jit cache: one compile per kind of input, every key component, bounded, thread-safe."""
import sys
import threading

import pytest
import torch

import primtrace
from primtrace.tracer.inputs import cache_key

pytestmark = pytest.mark.usefixtures("both_hit_paths")


def counts(jfn):
    info = primtrace.cache_info(jfn)
    return info.hits, info.misses


def test_same_kind_of_input_hits():
    jfn = primtrace.jit(lambda a, b: a + b)
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    torch.testing.assert_close(jfn(a, b), a + b)
    c, d = torch.randn(4, 5), torch.randn(4, 5)
    torch.testing.assert_close(jfn(c, d), c + d)  # new values, same trace
    assert counts(jfn) == (1, 1)


@pytest.mark.parametrize("change", ["dtype", "shape", "strides", "device-free layout",
                                    "requires_grad"])
def test_each_tensor_key_component_misses(change):
    jfn = primtrace.jit(lambda a, b: a * b)
    a, b = torch.randn(4, 6), torch.randn(6)
    jfn(a, b)
    other = {
        "dtype": a.to(torch.float64),
        "shape": torch.randn(5, 6),
        "strides": torch.randn(6, 4).t(),  # same shape, transposed memory
        "device-free layout": torch.randn(4, 12)[:, ::2],  # same shape, a strided view
        "requires_grad": a.clone().requires_grad_(),
    }[change]
    assert other.shape == a.shape or change == "shape"
    result = jfn(other, b)
    torch.testing.assert_close(result, other * b)
    assert result.dtype == (other * b).dtype
    assert counts(jfn) == (0, 2)
    jfn(other.clone() if change == "shape" else other, b)  # and that kind is now cached
    assert counts(jfn) == (1, 2)


def test_the_stride_class_of_contiguous_tensors_is_shared():
    jfn = primtrace.jit(lambda a: a + 1)
    jfn(torch.randn(2, 3))
    jfn(torch.randn(3, 2).t().contiguous())
    assert counts(jfn) == (1, 1)


def test_default_dtype_is_in_the_key():
    jfn = primtrace.jit(lambda x: x * 1.5)
    x = torch.arange(4)
    assert jfn(x).dtype == torch.float32
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert jfn(x).dtype == torch.float64
    finally:
        torch.set_default_dtype(previous)
    assert counts(jfn) == (0, 2)


def test_grad_mode_is_in_the_key():
    jfn = primtrace.jit(lambda x: x * 2)
    x = torch.randn(3, requires_grad=True)
    y = jfn(x)
    assert y.requires_grad
    with torch.no_grad():
        assert not jfn(x).requires_grad
    assert counts(jfn) == (0, 2)
    y.sum().backward()  # the torch executor keeps autograd working
    torch.testing.assert_close(x.grad, torch.full((3,), 2.0))


def test_number_values_are_runtime_inputs_types_are_keys():
    jfn = primtrace.jit(lambda x, s: x * s)
    x = torch.randn(5)
    torch.testing.assert_close(jfn(x, 2.0), x * 2.0)
    torch.testing.assert_close(jfn(x, 3.0), x * 3.0)  # same trace, new value
    assert counts(jfn) == (1, 1)
    assert jfn(torch.arange(3), 2).dtype == torch.int64
    assert jfn(torch.arange(3), 2.0).dtype == torch.float32  # type decides promotion
    assert counts(jfn) == (1, 3)


def test_a_number_whose_value_decides_control_flow_is_specialized():
    def f(x, n):
        return x * 2 if n > 0 else x - 1
    jfn = primtrace.jit(f)
    x = torch.randn(4)
    torch.testing.assert_close(jfn(x, 1.0), x * 2)
    torch.testing.assert_close(jfn(x, -1.0), x - 1)
    torch.testing.assert_close(jfn(x, 1.0), x * 2)
    assert counts(jfn) == (1, 2)
    trace = primtrace.last_traces(jfn)[0]
    assert trace.inputs[1].specialized


@pytest.mark.parametrize("fn, values", [
    (lambda x, s: torch.narrow(x, 1, s, 2), [torch.tensor(2), torch.tensor(0), torch.tensor(2)]),
    (lambda x, s: x[: int(s) + 1], [torch.tensor(1), torch.tensor(-1), torch.tensor(1)]),
    (lambda x, i: torch.tensor_split(x, i, 1), [torch.tensor([1, 3]), torch.tensor([0, 4, 4])]),
    (lambda x, flag: x * 2 if flag else x - 1, [torch.tensor(True), torch.tensor(False)]),
    (lambda x, n: x.repeat(int(n), 1, 1), [torch.tensor([2], dtype=torch.int32),
                                           torch.tensor([1], dtype=torch.int32)]),
])
def test_a_small_integer_argument_tensor_read_as_a_value_is_specialized(fn, values):
    """A tensor `start`, split indices or flag passed as an argument: its values are guarded
    (a call with other values traces again), never a stale trace."""
    x = torch.randn(4, 5, 3)
    jfn = primtrace.jit(fn)
    for v in values:
        got, want = jfn(x, v), fn(x, v)
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            assert torch.equal(g, w)
    assert counts(jfn)[1] == len({repr(v.tolist()) for v in values})


@pytest.mark.parametrize("fn, arg", [
    (lambda x, s: x.narrow(0, s.add_(1), 2), torch.tensor(1)),            # written first
    (lambda x, s: x.narrow(0, s * 1, 2), torch.tensor(1)),                # an intermediate
    (lambda x, s: x * 2 if s else x, torch.tensor(1.0)),                  # a float
    (lambda x, s: x * 2 if s.sum() else x, torch.ones(2, dtype=torch.long)),
    (lambda x, s: x[: s.tolist()[0]], torch.arange(65)),                  # too large
    (lambda x, s: x[: int(s[0])], torch.arange(3)),                       # a view of one
])
def test_value_reads_that_are_not_small_unwritten_integer_arguments_raise(fn, arg):
    with pytest.raises(primtrace.DataDependentError):
        primtrace.jit(fn)(torch.randn(4, 3), arg)


def test_none_ness_of_an_optional_argument_is_in_the_key():
    # a peer system reused the trace of clamp(x, lo, None) for clamp(x, lo, hi)
    jfn = primtrace.jit(lambda x, lo, hi: torch.clamp(x, lo, hi))
    x = torch.linspace(-3, 3, 7)
    lo, hi = torch.full((7,), -1.0), torch.full((7,), 1.0)
    torch.testing.assert_close(jfn(x, lo, None), torch.clamp(x, lo, None))
    torch.testing.assert_close(jfn(x, lo, hi), torch.clamp(x, lo, hi))
    assert counts(jfn) == (0, 2)


def test_keyword_names_and_structure_are_in_the_key():
    def f(x, **kw):
        return {k: x + v for k, v in kw.items()}
    jfn = primtrace.jit(f)
    x = torch.randn(3)
    assert set(jfn(x, a=1.0)) == {"a"}
    assert set(jfn(x, b=1.0)) == {"b"}
    jfn(x, a=2.0)
    assert counts(jfn) == (1, 2)

    g = primtrace.jit(lambda xs: sum(xs[1:], xs[0]))
    g([x, x])
    torch.testing.assert_close(g([x, x, x]), 3 * x)  # a longer list is another structure
    g((x, x))                                          # so is a tuple
    assert counts(g) == (0, 3)


def test_the_key_is_lean_and_distinguishes_what_it_must():
    x = torch.randn(2, 2)
    k1, leaves = cache_key((x, 2.0, None), {"flag": True})
    assert leaves == [x, 2.0]
    assert cache_key((x, 3.0, None), {"flag": True})[0] == k1
    assert cache_key((x, 3, None), {"flag": True})[0] != k1
    assert cache_key((x, 2.0, x), {"flag": True})[0] != k1
    assert cache_key((x, 2.0, None), {"flag": False})[0] != k1
    assert cache_key((x, 2.0, None), {"other": True})[0] != k1


def test_the_cache_is_bounded():
    jfn = primtrace.jit(lambda x: x + 1, cache_size=2, dynamic=False)
    for n in (1, 2, 3):
        jfn(torch.randn(n))
    info = primtrace.cache_info(jfn)
    assert (info.currsize, info.maxsize, info.misses) == (2, 2, 3)
    jfn(torch.randn(1))  # evicted: compiled again
    assert primtrace.cache_info(jfn).misses == 4
    jfn(torch.randn(3))
    assert primtrace.cache_info(jfn).hits == 1


def test_unknown_options_are_refused():
    with pytest.raises(TypeError, match="unknown primtrace option"):
        primtrace.jit(lambda x: x, cache_sise=3)


def test_a_cached_call_neither_traces_nor_interprets(monkeypatch):
    jit_module = sys.modules["primtrace.jit"]  # the attribute primtrace.jit is the function
    jfn = primtrace.jit(lambda a, b: (a + b) * a)
    a, b = torch.randn(3), torch.randn(3)
    jfn(a, b)

    def refuse(*args, **kwargs):
        raise AssertionError("a cached call traced again")
    monkeypatch.setattr(jit_module, "compile_fn", refuse)
    monkeypatch.setattr(jit_module, "acquire", refuse)
    torch.testing.assert_close(jfn(a, b), (a + b) * a)
    source = primtrace.last_trace(jfn).tags["python"]
    assert source.count("(") == len(primtrace.last_trace(jfn).nodes) + 1  # one call per node


def test_many_threads_share_one_jitted_function():
    jfn = primtrace.jit(lambda a, b: torch.add(a, b, alpha=2) * a)
    inputs = [(torch.randn(8), torch.randn(8)), (torch.randn(2, 3).half(), torch.randn(3))]
    errors, calls_per_thread, threads = [], 200, 8

    def work(seed):
        try:
            for i in range(calls_per_thread):
                a, b = inputs[(i + seed) % 2]
                torch.testing.assert_close(jfn(a, b), torch.add(a, b, alpha=2) * a)
        except Exception as e:  # reported below
            errors.append(e)
    pool = [threading.Thread(target=work, args=(s,)) for s in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not errors, errors[0]
    hits, misses = counts(jfn)
    assert misses == 2 and hits + misses == threads * calls_per_thread


def test_plain_tensor_calls_take_the_inlined_key_path(monkeypatch):
    jit_module = sys.modules["primtrace.jit"]
    jfn = primtrace.jit(lambda a, b: a - b)
    a, b = torch.randn(2, 3), torch.randn(3, 2).t()
    jfn(a, b)

    def refuse(*args, **kwargs):
        raise AssertionError("the inlined key differs from cache_key's")
    monkeypatch.setattr(jit_module, "cache_key", refuse)
    torch.testing.assert_close(jfn(a, b), a - b)  # found without cache_key
    assert counts(jfn) == (1, 1)


def test_parameter_arguments_are_served_by_the_hit_path():
    """The backend passes a graph's parameters as arguments: the hit path serves them (it
    sent every backend call through the keyed lookup), and a plain tensor in a parameter's
    place still misses it."""
    jfn = primtrace.jit(lambda x, w: x @ w)
    x, w = torch.randn(2, 3), torch.nn.Parameter(torch.randn(3, 4))
    with torch.no_grad():
        jfn(x, w)
        slow = jfn._lookup
        calls = []
        jfn._path.set_slow(lambda args, kwargs: calls.append(args) or slow(args, kwargs))
        torch.testing.assert_close(jfn(x, w), x @ w)
        assert calls == []
        torch.testing.assert_close(jfn(x, w.detach()), x @ w)
        assert len(calls) == 1


def test_number_arithmetic_stays_a_runtime_input():
    """lr * (1 - beta) is recorded as number nodes: other values reuse the trace."""
    def f(x, lr, beta):
        return x * (lr * (1 - beta)) + abs(-lr) / 2
    jf = primtrace.jit(f)
    x = torch.ones(3)
    for lr, beta in ((0.1, 0.9), (0.2, 0.5), (-3.0, 2.0)):
        torch.testing.assert_close(jf(x, lr, beta), f(x, lr, beta))
    assert primtrace.cache_info(jf).misses == 1
    names = [n.symbol.name for n in primtrace.last_trace(jf).nodes]
    assert "number_sub" in names and "number_mul" in names


def test_int_power_of_numbers_specializes_on_the_exponent():
    """2 ** n is an int or a float depending on n's sign: the value joins the key."""
    def g(x, n):
        return x * 2 ** n
    jg = primtrace.jit(g)
    x = torch.ones(2, dtype=torch.int64)
    assert jg(x, 2).dtype == torch.int64 and jg(x, -1).dtype == torch.float32
    assert primtrace.cache_info(jg).misses == 2


def test_reading_a_derived_number_specializes_its_sources():
    def h(x, a):
        b = a * 2
        return x + 1 if b > 1 else x - 1
    jh = primtrace.jit(h)
    x = torch.zeros(2)
    assert jh(x, 1.0).tolist() == [1.0, 1.0]
    assert jh(x, 0.1).tolist() == [-1.0, -1.0]
    assert primtrace.cache_info(jh).misses == 2


def test_overflow_check_of_a_runtime_number_is_a_guard_not_a_specialization():
    """addcmul's value must fit the dtype: checked at call time, the trace is reused."""
    def f(x, v):
        return torch.addcmul(x, x, x, value=v)
    jf = primtrace.jit(f)
    x = torch.ones(3, dtype=torch.int8)
    assert jf(x, 2).tolist() == [3, 3, 3]
    with pytest.raises(RuntimeError, match="value cannot be converted to type int8_t without overflow"):
        jf(x, 1000)
    with pytest.raises(RuntimeError, match="without overflow"):
        f(x, 1000)
    assert jf(x, -1).tolist() == [0, 0, 0]
    assert primtrace.cache_info(jf).misses == 1
    assert any(n.symbol.name == "check_fits" for n in primtrace.last_trace(jf).nodes)


def test_the_recent_entry_shortcut_never_serves_another_kind_of_input():
    """The hit path checks the entry the last call used first (torch's TensorGuards); any
    difference the key would see sends the call down the keyed path instead."""
    def f(a, b):
        return a * b + 1
    jf = primtrace.jit(f)
    a, b = torch.randn(4, 3), torch.randn(4, 3)
    variants = [(a, b), (a.t(), b.t()), (a.double(), b.double()), (a, b), (a[:2], b[:2]),
                (torch.nn.Parameter(a), b), (a.requires_grad_(False), b)]
    for args in variants * 2:
        got, expected = jf(*args), f(*args)
        assert got.dtype == expected.dtype and got.shape == expected.shape
        assert got.requires_grad == expected.requires_grad
        torch.testing.assert_close(got, expected)
    with torch.no_grad():
        assert not jf(torch.nn.Parameter(a), b).requires_grad
    old = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        assert jf(torch.ones(2, dtype=torch.int64), torch.ones(2, dtype=torch.int64)).dtype \
            == torch.int64
        assert (jf(torch.ones(2), torch.ones(2)) == 2).all()
    finally:
        torch.set_default_dtype(old)


def test_the_recent_entry_shortcut_takes_other_arities_and_keywords_down_the_keyed_path():
    def f(a, b=None, *, scale=2.0):
        return a * scale if b is None else (a + b) * scale
    jf = primtrace.jit(f)
    a, b = torch.randn(3), torch.randn(3)
    for args, kwargs in [((a,), {}), ((a, b), {}), ((a,), {}), ((a,), {"scale": 3.0}),
                         ((a, b), {}), ((), {"a": a, "b": b})] * 2:
        torch.testing.assert_close(jf(*args, **kwargs), f(*args, **kwargs))
    info = primtrace.cache_info(jf)
    assert info.hits + info.misses == 12
    jf.cache_clear()
    jf(a), jf(a)
    assert primtrace.cache_info(jf)[:2] == (1, 1)


def test_a_jitted_modules_attributes_named_like_partials_are_the_modules():
    """JitFunction is a functools.partial: its func/args/keywords must not hide a module's."""
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.args, self.func = {"depth": 2}, "relu"

        def forward(self, x):
            return x * 2
    jm = primtrace.jit(M())
    assert jm.args == {"depth": 2} and jm.func == "relu"
    with pytest.raises(AttributeError):
        primtrace.jit(lambda x: x).args


def test_errors_of_a_cached_call_reach_the_caller():
    """An error raised while the remembered entry runs (here eager's IndexError of an index
    only known at run time) propagates from the hit path, in C as in Python."""
    jf = primtrace.jit(lambda x, i: x[i])
    x = torch.randn(5, 2)
    jf(x, torch.tensor([1, 4]))
    jf(x, torch.tensor([0, 3]))
    with pytest.raises(IndexError):
        jf(x, torch.tensor([0, 7]))
    torch.testing.assert_close(jf(x, torch.tensor([2, 2])), x[torch.tensor([2, 2])])
    assert counts(jf) == (3, 1)


def test_a_jitted_function_is_freed_with_its_last_reference():
    """The hit path and the jitted function reference each other (a cycle the garbage
    collector frees)."""
    import gc
    import weakref
    jf = primtrace.jit(lambda a: a * 2)
    jf(torch.randn(3)), jf(torch.randn(3))
    ref = weakref.ref(jf)
    del jf
    gc.collect()
    assert ref() is None


def test_a_jitted_function_calling_another_with_cached_traces_compiles_again():
    """The inner function's cached traces hold proxies: they are primtrace's, not user state
    that leaked (a second compile of the outer function raised TracingError)."""
    inner = primtrace.jit(lambda x: x.sin())
    inner(torch.randn(3))
    outer = primtrace.jit(lambda x: inner(x) * 2)
    for n in (3, 4):
        x = torch.randn(n)
        torch.testing.assert_close(outer(x), x.sin() * 2)
    lin = torch.nn.Linear(3, 3)
    lin.forward = primtrace.jit(lin.forward)
    for n in (2, 5):
        assert lin(torch.randn(n, 3)).shape == (n, 3)


def test_a_jitted_module_is_an_nn_module_viewing_the_module():
    """``jit(module)`` is an nn.Module (DDP, optimizers and checkpoints take it) whose
    parameters, buffers, state_dict keys, mode, grads and attributes are the module's own."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    jm = primtrace.jit(model)
    assert isinstance(jm, torch.nn.Module) and isinstance(jm, primtrace.JitFunction)
    assert list(jm.state_dict()) == list(model.state_dict())
    assert [p for p in jm.parameters()] == list(model.parameters())
    assert dict(jm.named_buffers()).keys() == dict(model.named_buffers()).keys()
    assert jm.eval() is jm and not model.training and not jm.training
    assert jm.train() is jm and model.training
    x = torch.randn(3, 4)
    jm(x).sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    jm.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    jm.load_state_dict({k: torch.ones_like(v) for k, v in model.state_dict().items()})
    assert torch.equal(model[1].running_var, torch.ones(4))
    jm.scale, jm.extra = 2.0, torch.nn.Linear(2, 2)   # writes go to the module
    assert model.scale == 2.0 and "extra" in dict(model.named_children())
    del jm.extra
    assert "extra" not in dict(model.named_children())
    torch.testing.assert_close(jm.forward(x), model(x))
    assert primtrace.cache_info(jm).misses == 1


def test_a_jitted_module_inside_a_module_traced_by_jit():
    """A JitModule registered as a submodule: the outer module's state_dict sees through it,
    and jitting the outer module inlines it (outputs and grads as eager's)."""
    class Outer(torch.nn.Module):
        def __init__(self, block):
            super().__init__()
            self.block, self.head = block, torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.head(self.block(x).relu())
    torch.manual_seed(0)
    block = torch.nn.Linear(4, 4)
    outer = Outer(primtrace.jit(block))
    assert list(outer.state_dict()) == ["block.weight", "block.bias", "head.weight", "head.bias"]
    x = torch.randn(3, 4)
    expected = outer(x)
    expected.sum().backward()
    want = block.weight.grad.clone()
    block.weight.grad = None
    got = primtrace.jit(outer)(x)
    got.sum().backward()
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(block.weight.grad, want)
