"""What a jitted function returns: its own containers rebuilt around each call's tensors,
numbers read from tensors (item, equal, allclose), and is_compiling() while tracing."""
import abc
import collections
import dataclasses
import threading

import pytest
import torch

import primtrace
from primtrace.tracer import DataDependentError

NT = collections.namedtuple("NT", "a b")


@dataclasses.dataclass
class Out:
    a: torch.Tensor
    b: object = None
    n: int = 3


@dataclasses.dataclass(frozen=True)
class Frozen:
    x: torch.Tensor
    label: str = "f"


class OD(collections.OrderedDict):
    pass


class D(dict):
    pass


class L(list):
    pass


def _same(got, expected):
    """Same container types all the way down, equal tensors that are real tensors."""
    assert type(got) is type(expected)
    if isinstance(expected, torch.Tensor):
        assert type(got) is torch.Tensor
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    elif dataclasses.is_dataclass(expected):
        for f in dataclasses.fields(expected):
            _same(getattr(got, f.name), getattr(expected, f.name))
    elif isinstance(expected, dict):
        assert list(got) == list(expected)
        for k in expected:
            _same(got[k], expected[k])
    elif isinstance(expected, (tuple, list)):
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            _same(g, e)
    else:
        assert got == expected


@pytest.mark.parametrize("fn", [
    lambda x: NT(x + 1, x * 2),
    lambda x: NT(x, x),                                   # inputs returned as they are
    lambda x: Out(x + 1, [x * 2, "s"], 5),
    lambda x: Frozen(x.sin()),
    lambda x: OD(a=x + 1, b=None),
    lambda x: D(a=x + 1, k=2),
    lambda x: L([x + 1, x - 1]),
    lambda x: (NT(x, {"k": Out(x.cos(), None)}), Frozen(x * 3, "g")),
    lambda x: {"out": [Out(x + 2), NT(1, "a")]},
    lambda x: x.max(0),                                   # torch.return_types
], ids=["namedtuple", "namedtuple of inputs", "dataclass", "frozen dataclass",
        "OrderedDict subclass", "dict subclass", "list subclass", "nested", "in plain containers",
        "return_types"])
@pytest.mark.filterwarnings("ignore::primtrace.OpaqueOpWarning")
def test_output_containers_are_rebuilt_with_each_calls_tensors(fn):
    jfn = primtrace.jit(fn)
    first = jfn(torch.ones(3))
    for x in (torch.zeros(3), torch.arange(3.0)):
        got = jfn(x)
        _same(got, fn(x))
        assert got is not first
    assert primtrace.cache_info(jfn).misses == 1


def test_model_output_is_rebuilt():
    utils = pytest.importorskip("transformers.utils")

    @dataclasses.dataclass
    class Output(utils.ModelOutput):
        logits: torch.Tensor = None
        hidden: tuple = None
        loss: torch.Tensor = None

    fn = lambda x: Output(logits=x * 2, hidden=(x, x + 1))  # noqa: E731
    jfn = primtrace.jit(fn)
    jfn(torch.ones(2))
    got, expected = jfn(torch.arange(2.0)), fn(torch.arange(2.0))
    assert type(got) is Output and list(got.keys()) == ["logits", "hidden"] and got.loss is None
    assert type(got.logits) is torch.Tensor and got[0] is got.logits
    assert got["logits"] is got.logits and got.to_tuple()[1] is got.hidden
    torch.testing.assert_close(got.logits, expected.logits)
    torch.testing.assert_close(got.hidden[1], expected.hidden[1])
    assert repr(got) == repr(expected)
    got.logits = torch.zeros(2)           # ModelOutput's own setattr: item and field agree
    assert got["logits"] is got.logits and not jfn(torch.ones(2)).logits.eq(0).any()


def test_a_dict_dataclass_item_no_field_holds_is_rebuilt():
    """A dataclass that is also a dict, whose items are not its fields (here one item and
    one field alone): both are the call's tensors. The item came back as the traced proxy."""
    @dataclasses.dataclass
    class Both(dict):
        a: torch.Tensor = None
        b: torch.Tensor = None

        def __post_init__(self):
            self["sum"] = self.a + self.b

    fn = lambda x: Both(a=x + 1, b=x * 2)  # noqa: E731
    jfn = primtrace.jit(fn)
    jfn(torch.ones(2))
    got, expected = jfn(torch.arange(2.0)), fn(torch.arange(2.0))
    assert type(got) is Both and list(got) == ["sum"]
    for value, want in ((got["sum"], expected["sum"]), (got.a, expected.a), (got.b, expected.b)):
        assert type(value) is torch.Tensor
        torch.testing.assert_close(value, want)


def test_a_dataclass_attribute_its_post_init_computed_is_rebuilt():
    """A tensor a dataclass's __post_init__ stores in an attribute that is no field: the
    call's tensor (it came back as the traced proxy)."""
    @dataclasses.dataclass
    class Out:
        a: torch.Tensor = None

        def __post_init__(self):
            self.doubled = self.a * 2

    jfn = primtrace.jit(lambda x: Out(a=x + 1))
    jfn(torch.ones(2))
    got = jfn(torch.arange(2.0))
    assert type(got.doubled) is torch.Tensor
    torch.testing.assert_close(got.doubled, (torch.arange(2.0) + 1) * 2)


class _Dict(dict):
    pass


class _List(list):
    pass


class _Ordered(collections.OrderedDict):
    pass


@pytest.mark.parametrize("kind", [_Dict, _List, _Ordered])
def test_a_container_subclass_attribute_is_rebuilt(kind):
    """A dict or list subclass with a tensor in an attribute besides its items: both are
    the call's tensors (the attribute came back as the traced proxy)."""
    def fn(x):
        c = kind({"a": x + 1}) if issubclass(kind, dict) else kind([x + 1])
        c.extra = x * 2
        return c
    jfn = primtrace.jit(fn)
    jfn(torch.ones(2))
    got, x = jfn(torch.arange(2.0)), torch.arange(2.0)
    item = got["a"] if issubclass(kind, dict) else got[0]
    assert type(got) is kind and type(got.extra) is torch.Tensor and type(item) is torch.Tensor
    torch.testing.assert_close(got.extra, x * 2)
    torch.testing.assert_close(item, x + 1)


def test_an_object_made_while_tracing_is_rebuilt_with_each_calls_tensors():
    """A cache object the function builds and returns (transformers' DynamicCache: layers
    of objects holding keys and values) is a new object of its class on every call, holding
    that call's tensors; its __init__ is not run again."""
    class Layer(abc.ABC):   # abc.ABC's empty __slots__: still a plain object
        def __init__(self, k):
            self.keys, self.ready = k, True

    class Cache:
        made = 0

        def __init__(self, t, config):
            Cache.made += 1
            self.layers, self.config = [Layer(t), {"v": t + 1}], config

    config = object()
    fn = lambda x: (x + 1, Cache(x * 2, config))  # noqa: E731
    jfn = primtrace.jit(fn)
    first = jfn(torch.ones(2))[1]
    made = Cache.made
    for x in (torch.arange(2.0), torch.full((2,), 5.0)):
        _, cache = jfn(x)
        assert type(cache) is Cache and cache is not first and Cache.made == made
        assert type(cache.layers[0]) is Layer and cache.layers[0].ready is True
        assert cache.config is config
        assert type(cache.layers[0].keys) is torch.Tensor
        torch.testing.assert_close(cache.layers[0].keys, x * 2)
        torch.testing.assert_close(cache.layers[1]["v"], x * 2 + 1)


def test_a_returned_argument_object_is_the_same_object_updated_in_place():
    class Box:
        pass

    def f(x, box):
        box.t = x * 2
        return box

    box = Box()
    jfn = primtrace.jit(f)
    for x in (torch.ones(2), torch.arange(2.0)):
        assert jfn(x, box) is box
        torch.testing.assert_close(box.t, x * 2)


class _SlotCache:
    __slots__ = ("layers", "__dict__")

    def __init__(self, t):
        self.layers = [{"keys": t}]


class _CyclicCache:
    def __init__(self, t):
        self.layers, self.me = [{"keys": t}], self


@pytest.mark.parametrize("cls", [_SlotCache, _CyclicCache])
def test_an_object_primtrace_cannot_rebuild_warns(cls):
    """Attributes outside __dict__, or a cycle: said, not returned silently."""
    with pytest.warns(UserWarning, match=r"Cache object that holds traced values"):
        primtrace.jit(lambda x: (x + 1, cls(x * 2)))(torch.ones(2))


# --- numbers read from tensors ------------------------------------------------------------------
@pytest.mark.parametrize("fn, args", [
    (lambda t: t.item(), (torch.tensor([1.5]),)),
    (lambda t: t.sum().item(), (torch.tensor([3, 4]),)),
    (lambda t: (t > 0).all().item(), (torch.tensor([3, -4]),)),
    (lambda a, b: torch.equal(a, b), (torch.ones(2), torch.ones(2))),
    (lambda a, b: a.equal(b + 1), (torch.ones(2), torch.ones(2))),
    (lambda a, b: torch.equal(a, b[:1]), (torch.ones(2), torch.ones(2))),   # shapes differ
    (lambda a, b: torch.allclose(a, b + 1e-9), (torch.ones(2), torch.ones(2))),
    (lambda a, b: (a + 1, torch.allclose(a, b), a.sum().item() * 2 + 1), (torch.ones(2), torch.ones(2))),
    (lambda a: a * a.sum().item(), (torch.arange(3.0),)),
])
def test_item_equal_allclose_are_returned_as_computed_per_call(fn, args):
    jfn = primtrace.jit(fn)
    for scale in (1, 2, -1):
        call = [a * scale for a in args]
        got, expected = jfn(*call), fn(*call)
        if isinstance(expected, tuple):
            torch.testing.assert_close(got[0], expected[0])
            got, expected = got[1:], expected[1:]
        if isinstance(expected, torch.Tensor):
            torch.testing.assert_close(got, expected)
        else:
            assert got == expected and type(got) is type(expected)
    assert primtrace.cache_info(jfn).misses == 1


@pytest.mark.parametrize("fn", [
    lambda t: t if t.sum().item() > 0 else -t,
    lambda t: t if torch.equal(t, t + 0) else -t,
    lambda t: t * float(t.max().item()),
    lambda t: t[: int(t.sum().item())],
])
def test_control_flow_on_such_a_number_raises_at_the_users_line(fn):
    with pytest.raises(DataDependentError, match="known only when the trace runs") as info:
        primtrace.jit(fn)(torch.ones(3))
    assert "test_outputs.py" in str(info.value) and "lambda t:" in str(info.value)


# --- is_compiling --------------------------------------------------------------------------------
def test_is_compiling_is_true_while_tracing_only():
    seen = []

    def f(x):
        seen.append(torch.compiler.is_compiling())
        return x + 1
    jfn = primtrace.jit(f)
    jfn(torch.ones(2))
    jfn(torch.ones(2))   # a cached call runs no Python of f: it replays the append it traced
    assert seen == [True, True] and not torch.compiler.is_compiling()


def test_is_compiling_skips_a_libraries_value_reading_check():
    """transformers' mask utilities: ``if not is_compiling() and mask.all(): skip``."""
    def f(x, mask):
        if not torch.compiler.is_compiling() and mask.all():
            return x
        return x.masked_fill(~mask, 0.0)
    jfn = primtrace.jit(f)
    x, mask = torch.randn(4), torch.tensor([True, True, False, True])
    torch.testing.assert_close(jfn(x, mask), f(x, mask))
    torch.testing.assert_close(jfn(x, torch.ones(4, dtype=torch.bool)), x)


def test_is_compiling_is_restored_after_a_failed_trace():
    original = torch.compiler.is_compiling

    def f(x):
        if x.sum() > 0:
            return x
        return -x
    with pytest.raises(DataDependentError):
        primtrace.jit(f)(torch.ones(2))
    assert torch.compiler.is_compiling is original and not torch.compiler.is_compiling()


def test_is_compiling_is_per_thread():
    """Another thread running eager code while one traces keeps the true answer."""
    tracing, checked = threading.Event(), threading.Event()
    other = []

    def f(x):
        tracing.set()
        checked.wait(10)
        return x + 1

    def eager_thread():
        tracing.wait(10)
        other.append(torch.compiler.is_compiling())
        checked.set()
    thread = threading.Thread(target=eager_thread)
    thread.start()
    primtrace.jit(f)(torch.ones(2))
    thread.join(10)
    assert other == [False]


def test_a_returned_dataclass_and_replayed_state_writes_together():
    """The containers rebuild the function's own outputs; the written state is replayed."""
    @dataclasses.dataclass
    class Result:
        total: torch.Tensor

    class Box:
        pass

    def f(x, box, acc):
        y = torch.cat([box.t, x]) if hasattr(box, "t") else x
        box.t = y * 1
        acc.append(x * 2)
        return Result(y.sum())

    def run(fn):
        box, acc = Box(), []
        totals = [fn(torch.ones(2), box, acc) for _ in range(3)]
        return totals, box, acc

    (eager, ebox, eacc), (jitted, jbox, jacc) = run(f), run(primtrace.jit(f))
    assert [type(r) for r in jitted] == [type(r) for r in eager]
    assert [r.total.item() for r in jitted] == [r.total.item() for r in eager] == [2.0, 4.0, 6.0]
    assert type(jbox.t) is torch.Tensor and torch.equal(jbox.t, ebox.t)
    assert len(jacc) == len(eacc) == 3 and all(type(a) is torch.Tensor for a in jacc)


@pytest.mark.parametrize("fn", [
    lambda x: x.shape,
    lambda x: x.size(),
    lambda x: x.stride(),                                 # a tuple, as in eager
    lambda x: (x * 2, x.shape),
    lambda x: {"shape": x.shape, "y": x + 1},
    lambda x: Out(x + 1, x.shape),
    lambda x: x.shape[1:],
    lambda x: x.shape + (1,),
    lambda x: (1,) + x.shape[:1],
    lambda x: x.shape * 2,
], ids=["shape", "size()", "stride()", "tensor and shape", "dict", "dataclass", "slice",
        "sum", "reflected sum", "repeat"])
def test_a_returned_shape_is_a_torch_size_as_in_eager(fn):
    """torch.fx registers torch.Size with pytree as a node that unflattens to a plain tuple;
    shapes with sizes known only at run time (the calls after a recompile for a new batch
    size) are torch.Size too, with their slices and sums."""
    jfn = primtrace.jit(fn)
    for x in (torch.randn(2, 3), torch.randn(4, 3), torch.randn(5, 3)):
        got, expected = jfn(x), fn(x)
        _same(got, expected)   # the same container types all the way down
