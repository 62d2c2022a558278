"""Python state a jitted function reads or writes besides its arguments' tensors: globals
of exec'd functions, closure cells, and writes to plain objects, lists and dicts. Each
test compares the returned values AND the state after each call with eager."""
import pytest
import torch

import primtrace

pytestmark = [pytest.mark.filterwarnings("ignore::primtrace.OpaqueOpWarning"),
              pytest.mark.usefixtures("both_hit_paths")]


# --- item 6: globals of exec'd functions, closure cells ---------------------------------------
def test_globals_of_a_function_execd_in_its_own_dict_are_read_per_call():
    g = {"torch": torch, "K": 1.0, "W": torch.ones(2)}
    exec("def f(x): return x * W + K", g)   # noqa: S102
    jf, x = primtrace.jit(g["f"]), torch.randn(2)
    torch.testing.assert_close(jf(x), g["f"](x))
    g["K"] = 5.0
    torch.testing.assert_close(jf(x), g["f"](x))
    g["W"] = torch.full((2,), 3.0)
    torch.testing.assert_close(jf(x), g["f"](x))


def test_a_closure_of_an_execd_function_is_read_per_call():
    g = {"torch": torch}
    exec("def make():\n"                          # noqa: S102
         "    k = 1.0\n"
         "    def f(x): return x + k\n"
         "    def set_k(v):\n"
         "        nonlocal k\n"
         "        k = v\n"
         "    return f, set_k\n", g)
    f, set_k = g["make"]()
    jf, x = primtrace.jit(f), torch.randn(3)
    torch.testing.assert_close(jf(x), f(x))
    set_k(4.0)
    torch.testing.assert_close(jf(x), f(x))


SCALE = 2.0


def test_helpers_held_in_cells_are_guarded_even_if_they_never_call_torch():
    k = 2.0

    def helper():            # reads a cell and a global, never calls torch
        return k * SCALE

    def f(x):
        return x * helper()
    jf, x = primtrace.jit(f), torch.randn(3)
    torch.testing.assert_close(jf(x), f(x))
    k = 5.0
    torch.testing.assert_close(jf(x), f(x))
    global SCALE
    old, SCALE = SCALE, -1.0
    try:
        torch.testing.assert_close(jf(x), f(x))
    finally:
        SCALE = old


# --- item 1: writes to plain Python state are replayed on every call ----------------------------
import copy  # noqa: E402
import types  # noqa: E402

import torch.nn as nn  # noqa: E402

from primtrace.ir.proxy import Proxy  # noqa: E402
from primtrace.tracer import TracingError  # noqa: E402
from primtrace.tracer.pystate import find_proxy  # noqa: E402


def _plain(v):
    """A comparable picture of `v` (tensors cloned, objects as their class and attributes)."""
    assert not isinstance(v, Proxy), "a proxy escaped"
    if isinstance(v, torch.Tensor):
        return ("tensor", v.detach().clone())
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, [_plain(x) for x in v])
    if isinstance(v, dict):
        return ("dict", [(k, _plain(x)) for k, x in v.items()])
    if hasattr(v, "__dict__") and not isinstance(v, (types.FunctionType, type, nn.Module)):
        return (type(v).__name__, _plain(vars(v)))
    return v


def _assert_same(a, b, where):
    if isinstance(a, tuple) and a and a[0] == "tensor":
        assert isinstance(b, tuple) and b[0] == "tensor", where
        torch.testing.assert_close(a[1], b[1], rtol=0, atol=0, msg=where)
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, type(a)) and len(a) == len(b), f"{where}: {a} != {b}"
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{where}[{i}]")
    else:
        assert type(a) is type(b) and a == b, f"{where}: {a!r} != {b!r}"


def check_like_eager(fn, setup, calls=4):
    """Run `fn` eagerly and jitted from the same fresh state; after each call compare what
    it returned and the state. setup() -> (args_of(i) -> (args, kwargs), state() -> object)."""
    seen = {}
    for mode in ("eager", "jit"):
        args_of, state = setup()
        call = primtrace.jit(fn) if mode == "jit" else fn
        seen[mode] = []
        for i in range(calls):
            args, kwargs = args_of(i)
            out = call(*args, **kwargs)
            assert find_proxy([("state", state()), ("out", out)]) is None
            seen[mode].append((_plain(out), _plain(state())))
    for i, (ours, theirs) in enumerate(zip(seen["jit"], seen["eager"])):
        _assert_same(ours, theirs, f"call {i}")


class Box:
    pass


def test_the_issue_example_attribute_presence_and_value():
    def f(x, box):
        y = torch.cat([box.t, x]) if hasattr(box, "t") else x
        box.t = y * 1
        return y.sum()

    def setup():
        box = Box()
        return lambda i: ((torch.ones(2) * (i + 1), box), {}), lambda: box
    check_like_eager(f, setup)


@pytest.mark.parametrize("namespace", [Box, types.SimpleNamespace])
def test_attribute_writes_and_a_counter_on_plain_objects(namespace):
    def f(x, ns):
        ns.n += 1                    # a Python int written: guarded, the next call retraces
        ns.last = x * ns.n
        if hasattr(ns, "gone"):
            del ns.gone
        return x + ns.n

    def setup():
        ns = namespace()
        ns.n, ns.gone = 0, "here"
        return lambda i: ((torch.full((2,), float(i)), ns), {}), lambda: ns
    check_like_eager(f, setup)


def test_objects_passed_as_keyword_arguments():
    def f(x, *, box, scale=2.0):
        box.out = x * scale
        box.calls = getattr(box, "calls", 0) + 1
        return x - 1

    def setup():
        box = Box()
        return lambda i: ((torch.arange(3.0) + i,), {"box": box, "scale": float(i)}), lambda: box
    check_like_eager(f, setup)


@pytest.mark.parametrize("op", ["append", "extend", "setitem", "insert", "pop", "slice"])
def test_list_writes_on_an_argument_list(op):
    def f(x, acc):
        if op == "append":
            acc.append(x * 2)
        elif op == "extend":
            acc.extend([x, x + 1])
        elif op == "setitem":
            acc[0] = acc[0] + x
        elif op == "insert":
            acc.insert(0, x.sum())
        elif op == "pop":
            acc.pop() if len(acc) > 1 else acc.append(x)
        else:
            acc[1:] = [x]
        return x + len(acc)

    def setup():
        acc = [torch.zeros(2), torch.ones(2)]
        return lambda i: ((torch.full((2,), float(i)), acc), {}), lambda: acc
    check_like_eager(f, setup)


def test_the_issue_example_accumulator_list():
    def g(x, acc):
        acc.append(x * 2)
        return x + 1

    def setup():
        acc = []
        return lambda i: ((torch.arange(2.0) * i, acc), {}), lambda: acc
    check_like_eager(g, setup)


@pytest.mark.parametrize("op", ["setitem", "update", "pop", "pop_and_set", "setdefault"])
def test_dict_writes_on_an_argument_dict_and_an_object_attribute(op):
    def f(x, d, box):
        for target in (d, box.d):
            if op == "setitem":
                target["y"] = x * 2
            elif op == "update":
                target.update(y=x, n=len(target))
            elif op == "pop":
                target.pop("a", None)
            elif op == "pop_and_set":
                target["a"] = target.pop("a") + x   # moves "a" last
            else:
                target.setdefault("s", x)
        return x * 3

    def setup():
        box = Box()
        d, box.d = {"a": torch.ones(2), "b": 1}, {"a": torch.ones(2), "b": 1}
        return lambda i: ((torch.arange(2.0) - i, d, box), {}), lambda: (d, box)
    check_like_eager(f, setup)


def test_nested_containers_and_new_objects_are_rebuilt_per_call():
    class State:
        def __init__(self, t):
            self.t = t

    def f(x, box):
        box.history = {"values": [x * 2], "state": State(x + 1), "pair": (x, 1)}
        box.log = getattr(box, "log", []) + ["call"]
        return x

    def setup():
        box = Box()
        return lambda i: ((torch.full((2,), float(i)), box), {}), lambda: box
    check_like_eager(f, setup)
    box = Box()
    jf = primtrace.jit(f)
    jf(torch.ones(2), box)
    first = box.history
    jf(torch.ones(2), box)
    assert box.history is not first and box.history["values"] is not first["values"]


CACHE = {}


def cached_scale(x):
    key = tuple(x.shape)
    if key not in CACHE:
        CACHE[key] = x * 3
    return x + CACHE[key]


def test_a_global_dict_cache_filled_while_tracing():
    def setup():
        CACHE.clear()
        return (lambda i: ((torch.full((i % 2 + 1,), float(i)),), {}), lambda: dict(CACHE))
    try:
        check_like_eager(cached_scale, setup, calls=5)
    finally:
        CACHE.clear()


TOTAL = None


def accumulate(x):
    global TOTAL
    TOTAL = x if TOTAL is None else TOTAL + x
    return TOTAL * 1


def test_a_global_rebound_by_the_function():
    global TOTAL

    def setup():
        global TOTAL
        TOTAL = None
        return (lambda i: ((torch.full((2,), float(i)),), {}), lambda: TOTAL)
    try:
        check_like_eager(accumulate, setup)
    finally:
        TOTAL = None


def test_a_nonlocal_counter_and_cell():
    def make():
        count, last = 0, None

        def f(x):
            nonlocal count, last
            count += 1
            last = x * count
            return x + count
        return f, lambda: (count, last)

    def run(call_of):
        f, state = make()
        call = call_of(f)
        seen = []
        for i in range(3):
            out = call(torch.full((2,), float(i)))
            seen.append((_plain(out), _plain(state())))
        return seen
    _assert_same(run(primtrace.jit), run(lambda f: f), "nonlocal")


def test_a_plain_dict_attribute_of_a_module():
    class Memo(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self.memo = {}

        def forward(self, x):
            y = self.lin(x)
            self.memo["last"] = y
            self.memo["count"] = self.memo.get("count", 0) + 1
            return y
    torch.manual_seed(0)
    m = Memo()
    eager = copy.deepcopy(m)
    jm = primtrace.jit(m)
    with torch.no_grad():
        for i in range(3):
            x = torch.randn(2, 3)
            torch.testing.assert_close(jm(x), eager(x))
            _assert_same(_plain(m.memo), _plain(eager.memo), f"call {i}")


class Layer:
    def __init__(self):
        self.keys = None


class KVCache:
    def __init__(self, n):
        self.layers = [Layer() for _ in range(n)]

    def update(self, i, k):
        layer = self.layers[i]
        layer.keys = k if layer.keys is None else torch.cat([layer.keys, k])
        return layer.keys


def test_a_kv_cache_object_grown_in_a_loop():
    def step(x, cache):
        h = x
        for i in range(len(cache.layers)):
            h = h + cache.update(i, h).sum(0, keepdim=True)
        return h

    def setup():
        cache = KVCache(2)
        return lambda i: ((torch.full((1, 2), float(i)), cache), {}), lambda: cache
    check_like_eager(step, setup)


def test_the_same_object_reused_needs_no_retrace_when_nothing_it_read_changed():
    def f(x, box):
        box.out = x * 2
        return x
    jf, box = primtrace.jit(f), Box()
    for _ in range(3):
        x = torch.randn(2)
        jf(x, box)
        torch.testing.assert_close(box.out, x * 2)
    # the first call saw no `out`, the second one did; from then on it is cached
    assert primtrace.cache_info(jf).misses == 2


class Slotted:
    __slots__ = ("t", "n")


class Registry:
    count = 0


def test_slots_and_class_attributes_are_replayed_too():
    def f(x, holder, registry):
        holder.t = x * 2
        type(registry).count += 1
        type(registry).last = x + type(registry).count
        return x

    def setup():
        klass = type("Registry", (Registry,), {})
        holder, registry = Slotted(), klass()
        return (lambda i: ((torch.full((2,), float(i)), holder, registry), {}),
                lambda: (holder.t, klass.count, klass.last))
    check_like_eager(f, setup)


def test_a_write_that_cannot_be_replayed_is_an_error_and_leaves_no_proxy():
    def f(x, box):
        box.made = Slotted()
        box.made.t = x * 2     # a slotted object made while tracing: not rebuilt
        return x
    box = Box()
    with pytest.raises(TracingError, match=r"argument 1.made.*Slotted"):
        primtrace.jit(f)(torch.ones(2), box)
    assert not hasattr(box, "made")


def test_a_write_too_deep_to_see_is_an_error_naming_where_it_was_left():
    def f(x, box):
        box.a.b.c.d.e.f.g.h = x * 2
        return x
    box = Box()
    inner = box
    for name in "abcdefg":
        setattr(inner, name, Box())
        inner = getattr(inner, name)
    with pytest.raises(TracingError, match=r"left in .*\.h while tracing"):
        primtrace.jit(f)(torch.ones(2), box)


def test_primtrace_imported_through_an_unnormalized_sys_path_entry(tmp_path):
    """A sys.path entry like "/repo/." gives primtrace's modules such filenames: they are
    still primtrace's own code (not the user's, whose globals the state guard reads)."""
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = tmp_path / "prog.py"
    script.write_text(
        f"import sys\nsys.path.insert(0, {root + os.sep + '.'!r})\n"
        "import torch, primtrace\n"
        "assert '/./' in primtrace.__file__\n"
        "scale = 2.0\n"
        "def f(x):\n    return x * scale\n"
        "jf = primtrace.jit(f)\n"
        "assert jf(torch.ones(2)).tolist() == [2.0, 2.0]\n"
        "scale = 3.0\n"
        "assert jf(torch.ones(2)).tolist() == [3.0, 3.0]\n"
        "print('ok')\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=env, cwd=str(tmp_path), timeout=300)
    assert done.stdout.strip() == "ok", done.stderr[-2000:]


def test_a_jitted_optimizer_step_that_makes_state_raises_rather_than_keep_a_proxy():
    """SGD with momentum stores its momentum buffer in ``optimizer.state`` (a defaultdict
    keyed by parameters, in torch's object): primtrace does not replay that write, and it
    left a proxy there, silently (the next step read a wrong buffer)."""
    p = torch.nn.Parameter(torch.randn(3))
    p.grad = torch.ones(3)
    opt = torch.optim.SGD([p], 0.1, momentum=0.9)
    with pytest.raises(TracingError, match=r"(?s)self\.state\[.*\]\['momentum_buffer'\]"):
        primtrace.jit(opt.step)()
    assert len(opt.state) == 0   # put back as it was: the next eager step is eager's
    opt.step()   # momentum's first buffer is the gradient
    assert torch.equal(opt.state[p]["momentum_buffer"], torch.ones(3))


@pytest.mark.parametrize("foreach", [False, True])
def test_an_optimizer_step_that_fails_while_tracing_leaves_its_state_as_it_was(foreach):
    """An error in the user's step (here a learning rate that is not a number) after the
    step made its state: the state is put back, and eager steps run after it."""
    model = torch.nn.Linear(4, 3)
    model(torch.randn(2, 4)).sum().backward()
    opt = torch.optim.Adam(model.parameters(), lr=0.1, foreach=foreach)
    opt.param_groups[0]["lr"] = "not a number"
    with pytest.raises(TypeError):
        primtrace.jit(opt.step)()
    assert len(opt.state) == 0 and opt.param_groups[0]["lr"] == "not a number"
    opt.param_groups[0]["lr"] = 0.1
    opt.step()
    assert all(type(v) is torch.Tensor for st in opt.state.values() for v in st.values())
