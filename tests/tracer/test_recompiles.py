"""Recompile reasons: cache_info(jfn).recompiles says why each compile after the first
happened, comparing the call with the nearest cached entry; a warning at recompile_limit."""
import sys
import types
import warnings

import pytest
import torch
import torch.nn as nn

import primtrace
from primtrace.recompiles import KEPT, Change, Recompile, RecompileWarning

X = torch.randn(2, 4)


def recompiles(jfn) -> tuple:
    return primtrace.cache_info(jfn).recompiles


def only_reason(jfn) -> Recompile:
    found = recompiles(jfn)
    assert len(found) == 1, found
    return found[0]


def add(x, y):
    return x.sum() + y


# --- inputs ------------------------------------------------------------------------------------
def test_the_first_compile_and_hits_are_no_recompiles():
    jf = primtrace.jit(add)
    for _ in range(3):
        jf(X, X)
    info = primtrace.cache_info(jf)
    assert (info.hits, info.misses, info.recompiles) == (2, 1, ())


def test_shape():
    jf = primtrace.jit(add)
    jf(torch.ones(3), torch.ones(3))
    jf(torch.ones(4), torch.ones(3))
    r = only_reason(jf)
    assert (r.kind, r.what, r.old, r.new, r.number) == ("shape", "x", "[3]", "[4]", 1)
    assert r.reason == "tensor 'x' size mismatch at index 0: expected 3, actual 4"
    assert str(r) == r.reason and "#1" in repr(r)


def test_rank():
    jf = primtrace.jit(add)
    jf(torch.ones(3), 1.0)
    jf(torch.ones(2, 3), 1.0)
    assert only_reason(jf).reason == "tensor 'x' shape mismatch: expected [3], actual [2, 3]"


def test_dtype():
    jf = primtrace.jit(add)
    jf(X, X)
    jf(X, X.double())
    r = only_reason(jf)
    assert (r.kind, r.what, r.old, r.new) == ("dtype", "y", "float32", "float64")
    assert r.reason == "tensor 'y' dtype mismatch: expected float32, actual float64"


def test_strides():
    jf = primtrace.jit(add)
    a = torch.randn(4, 4)
    jf(a, a)
    jf(a.t(), a)
    r = only_reason(jf)
    assert (r.kind, r.old, r.new) == ("strides", "contiguous", "strides (1, 4)")
    assert r.reason == "tensor 'x' stride mismatch: expected contiguous, actual strides (1, 4)"


def test_requires_grad():
    jf = primtrace.jit(add)
    jf(X, X)
    jf(X, X.clone().requires_grad_())
    r = only_reason(jf)
    assert (r.kind, r.what, r.old, r.new) == ("requires_grad", "y", "False", "True")
    assert r.reason == "tensor 'y' requires_grad mismatch: expected False, actual True"


def test_tensor_type():
    jf = primtrace.jit(add)
    jf(X, X)
    jf(X, nn.Parameter(X.clone(), requires_grad=False))
    r = only_reason(jf)
    assert (r.kind, r.old, r.new) == ("tensor type", "Tensor", "Parameter")


def test_number_type():
    jf = primtrace.jit(add)
    jf(X, 2)
    jf(X, 3)     # another value, same type: a hit
    jf(X, 2.5)
    r = only_reason(jf)
    assert (r.kind, r.what, r.old, r.new) == ("number type", "y", "int", "float")
    assert r.reason == "number 'y' type mismatch: expected int, actual float"


def test_specialized_number_value():
    jf = primtrace.jit(lambda x, n: x.reshape(n, -1))
    jf(torch.ones(4), 2)
    jf(torch.ones(4), 4)
    jf(torch.ones(4), 2)   # back to a compiled value: a hit
    r = only_reason(jf)
    assert (r.kind, r.what, r.old, r.new) == ("specialized value", "n", "2", "4")
    assert r.reason.startswith("number 'n' value mismatch: expected 2, actual 4")


def test_structure():
    def f(x, xs, flag=True, **kw):
        return x * len(xs) if flag else x
    jf = primtrace.jit(f)
    jf(X, (X, X))
    jf(X, [X, X])                   # a list instead of a tuple
    jf(X, [X])                      # one item fewer
    jf(X, [X], flag=False)          # a keyword argument now given
    jf(X, [X], flag=True)           # a constant: in the key by value
    jf(X, {"a": X})
    texts = [r.reason for r in recompiles(jf)]
    assert [r.kind for r in recompiles(jf)] == ["structure"] * 3 + ["constant", "structure"]
    assert texts[:4] == [
        "argument 'xs' structure mismatch: expected a tuple of 2, actual a list of 2",
        "argument 'xs' structure mismatch: expected a list of 2, actual a list of 1",
        "keyword arguments mismatch: expected (), actual (flag)",
        "argument 'flag' value mismatch: expected False, actual True (a constant of the "
        "trace, in the key by value)"]
    assert "actual a dict with keys ('a')" in texts[4]


def test_nested_paths_and_argument_count():
    def f(*xs):
        return xs[0] + 1
    jf = primtrace.jit(f)
    jf(X)
    jf(X, X)
    assert only_reason(jf).reason == "positional argument count mismatch: expected 1, actual 2"
    jg = primtrace.jit(lambda d: d["a"][1] + 1)
    jg({"a": (X, X)})
    jg({"a": (X, X.double())})
    assert only_reason(jg).reason == \
        "tensor 'd['a'][1]' dtype mismatch: expected float32, actual float64"


def test_default_dtype_and_grad_mode():
    jf = primtrace.jit(lambda x: x * 2)
    jf(X)
    with torch.no_grad():
        jf(X)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        jf(X)   # nearest: the no_grad entry (grad mode on again, default dtype changed)
    finally:
        torch.set_default_dtype(old)
    first, second = recompiles(jf)
    assert (first.kind, first.old, first.new) == ("grad mode", "enabled", "disabled")
    assert first.reason.startswith("grad mode mismatch: expected enabled, actual disabled")
    assert second.kind == "default dtype"
    assert second.reason.startswith("default dtype mismatch: expected float32, actual float64")


def test_several_changes_are_all_listed_and_the_nearest_entry_is_used():
    jf = primtrace.jit(add)
    jf(torch.ones(3), torch.ones(3))
    jf(torch.ones(5, dtype=torch.float64), torch.ones(3))
    jf(torch.ones(5, dtype=torch.float64), torch.ones(3, dtype=torch.int64))
    first, second = recompiles(jf)
    assert [c.kind for c in first.changes] == ["dtype", "shape"]
    assert first.reason == ("tensor 'x' dtype mismatch: expected float32, actual float64; "
                            "tensor 'x' size mismatch at index 0: expected 3, actual 5")
    assert all(isinstance(c, Change) for c in first.changes)
    # the second entry is nearer than the first (one difference, not three)
    assert second.reason == "tensor 'y' dtype mismatch: expected float32, actual int64"


def test_eviction():
    jf = primtrace.jit(lambda x: x + 1, cache_size=1, dynamic=False)
    jf(torch.ones(1))
    jf(torch.ones(2))
    jf(torch.ones(1))
    first, second = recompiles(jf)
    assert first.kind == "shape" and second.kind == "evicted"
    assert "evicted" in second.reason and "cache_size" in second.reason


# --- state guards ------------------------------------------------------------------------------
def test_module_eval_and_train():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    jm = primtrace.jit(model)
    jm(X)
    model.eval()
    jm(X)
    model.train()
    jm(X)     # the train variant is still cached: a hit
    r = only_reason(jm)
    assert (r.kind, r.what, r.old, r.new) == ("training", "self.1.training", "True", "False")
    assert r.reason == ("self.1.training changed: expected True, actual False "
                        "(module.eval() was called)")
    assert primtrace.cache_info(jm).hits == 1


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.scale = 2.0

    def forward(self, x):
        return self.fc(x) * self.scale


def test_module_attribute():
    m = Scaled()
    jm = primtrace.jit(m)
    jm(X)
    m.scale = 3.0
    jm(X)
    r = only_reason(jm)
    assert (r.kind, r.what, r.old, r.new) == ("attribute", "self.scale", "2.0", "3.0")
    assert r.reason == "self.scale changed: expected 2.0, actual 3.0"


def test_replaced_submodule_and_parameter_metadata():
    m = Scaled()
    jm = primtrace.jit(m)
    jm(X)
    m.fc = nn.Linear(4, 4)
    jm(X)
    m.fc.weight.requires_grad_(False)
    jm(X)
    m.fc.weight = nn.Parameter(torch.randn(4, 4))   # same metadata: an input, no recompile
    jm(X)
    module, parameter = recompiles(jm)
    assert (module.kind, module.what) == ("submodule", "self.fc")
    assert module.reason == "self.fc changed: expected a Linear module, actual another Linear module"
    assert (parameter.kind, parameter.what) == ("requires_grad", "self.fc.weight")
    assert parameter.reason == \
        "tensor 'self.fc.weight' requires_grad mismatch: expected True, actual False"


def test_hooks():
    m = Scaled()
    jm = primtrace.jit(m)
    jm(X)
    handle = m.register_forward_hook(lambda *a: None)
    try:
        jm(X)
    finally:
        handle.remove()
    r = only_reason(jm)
    assert r.kind == "hooks"
    assert r.reason == "self._forward_hooks changed: expected 0 hook(s), actual 1"


SCALE = 2.0
CONFIG = types.SimpleNamespace(k=1)


def scaled(x):
    return x * SCALE


def configured(x):
    return x * CONFIG.k


def test_global_rebinding():
    global SCALE
    jf = primtrace.jit(scaled)
    jf(X)
    SCALE = 3.0
    try:
        jf(X)
    finally:
        SCALE = 2.0
    jf(X)   # back: a hit
    r = only_reason(jf)
    assert (r.kind, r.what, r.old, r.new) == ("global", "global SCALE", "2.0", "3.0")
    assert r.reason == "global SCALE changed: expected 2.0, actual 3.0"


def test_global_object_attributes_and_identity():
    global CONFIG
    jf = primtrace.jit(configured)
    jf(X)
    CONFIG.k = 2
    jf(X)
    old, CONFIG = CONFIG, types.SimpleNamespace(k=2)
    jf(X)
    CONFIG.extra = True
    jf(X)
    CONFIG = old
    value, identity, keys = recompiles(jf)
    assert value.reason == "global CONFIG.k changed: expected 1, actual 2"
    assert identity.reason == ("global CONFIG changed: expected a SimpleNamespace object, "
                               "actual another SimpleNamespace object")
    assert keys.reason == "global CONFIG keys changed: added 'extra'"
    assert {value.kind, identity.kind, keys.kind} == {"global"}


def test_closure_variable():
    n = 2

    def f(x):
        return x * n
    jf = primtrace.jit(f)
    jf(X)
    n = 5
    jf(X)
    r = only_reason(jf)
    assert (r.kind, r.what) == ("closure", "closure variable n")
    assert r.reason == "closure variable n changed: expected 2, actual 5"


ACC = []


def appends(x):
    y = x * 2
    ACC.append(y)
    return y


def test_python_state_written():
    ACC.clear()
    jf = primtrace.jit(appends)
    jf(X)
    jf(X)
    ACC.clear()
    r = only_reason(jf)
    assert (r.kind, r.what, r.old, r.new) == ("global", "global ACC", "0", "1")
    assert r.reason == "global ACC length changed: expected 0, actual 1"


def test_state_tensor_gone():
    box = types.SimpleNamespace(w=torch.ones(4))

    def f(x):
        return x * box.w
    jf = primtrace.jit(f)
    jf(X)
    box.w = torch.ones(4, dtype=torch.float64)
    jf(X)
    r = only_reason(jf)
    assert r.kind == "dtype" and "expected float32, actual float64" in r.reason


# --- bookkeeping -------------------------------------------------------------------------------
def test_hits_add_no_reasons_on_either_hit_path(both_hit_paths):
    jf = primtrace.jit(add)
    jf(X, X)
    jf(X, X.double())
    for _ in range(5):
        jf(X, X)
        jf(X, X.double())
    info = primtrace.cache_info(jf)
    assert (info.misses, len(info.recompiles), info.hits) == (2, 1, 10)


def test_cache_clear_clears_the_recompiles():
    jf = primtrace.jit(add)
    jf(X, X)
    jf(X, 1.0)
    assert len(recompiles(jf)) == 1
    jf.cache_clear()
    jf(X, 1.0)   # a first compile again
    assert recompiles(jf) == ()
    info = primtrace.cache_info(jf)
    assert info[:4] == (0, 1, 256, 1) and (info.hits, info.misses) == (0, 1)


def growing(x):
    return x + 1


def test_warning_at_the_limit_once():
    jf = primtrace.jit(growing, recompile_limit=3, dynamic=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 9):
            jf(torch.ones(n))
    found = [w for w in caught if issubclass(w.category, RecompileWarning)]
    assert len(found) == 1
    text = str(found[0].message)
    assert "recompile_limit (3)" in text and "'growing'" in text
    assert "last reason: tensor 'x' size mismatch at index 0: expected 3, actual 4" in text
    assert "primtrace.cache_info(jitted_fn).recompiles" in text
    assert "primtrace.jit(growing, recompile_limit=6)" in text
    assert found[0].filename == __file__   # points at the user's call
    assert len(recompiles(jf)) == 7


def test_a_warning_made_an_error_leaves_the_cache_whole():
    jf = primtrace.jit(growing, recompile_limit=1)
    jf(torch.ones(1))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecompileWarning)
        with pytest.raises(RecompileWarning):
            jf(torch.ones(2))
    torch.testing.assert_close(jf(torch.ones(2)), torch.full((2,), 2.0))   # compiled: a hit
    info = primtrace.cache_info(jf)
    assert (info.misses, info.hits, len(info.recompiles)) == (2, 1, 1)


def test_default_limit_is_torchs_and_none_never_warns():
    import torch._dynamo.config as dynamo_config
    assert sys.modules["primtrace.jit"].OPTIONS["recompile_limit"] == \
        getattr(dynamo_config, "recompile_limit", 8) == 8
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecompileWarning)
        jf = primtrace.jit(growing, recompile_limit=None, dynamic=False)
        for n in range(1, 12):
            jf(torch.ones(n))
    jd = primtrace.jit(growing, dynamic=False)
    with pytest.warns(RecompileWarning, match=r"recompile_limit \(8\)"):
        for n in range(1, 10):
            jd(torch.ones(n))
    for bad in (0, -1, 2.5, "8"):
        with pytest.raises(ValueError, match="recompile_limit"):
            primtrace.jit(growing, recompile_limit=bad)


def test_the_list_is_bounded_but_numbers_go_on():
    jf = primtrace.jit(growing, recompile_limit=None, cache_size=4, dynamic=False)
    for n in range(1, KEPT + 12):
        jf(torch.ones(n))
    found = recompiles(jf)
    assert len(found) == KEPT and found[-1].number == KEPT + 10


def test_recompiles_are_logged(caplog):
    jf = primtrace.jit(growing)
    with caplog.at_level("INFO", logger="primtrace.recompiles"):
        jf(torch.ones(1))
        jf(torch.ones(2))
    assert "tensor 'x' size mismatch at index 0: expected 1, actual 2" in caplog.text


class _Counting(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.lin(x) * self.calls


def test_a_counter_in_module_state_runs_eagerly_instead_of_compiling_every_call():
    """``self.calls += 1``: each value compiled again (every call, past the recompile
    limit); after recompiles.COUNTER_MISSES new values the key runs eagerly, said once."""
    from primtrace.recompiles import COUNTER_MISSES, CounterWarning
    m = _Counting()
    jm = primtrace.jit(m)
    x = torch.randn(2, 4)
    with pytest.warns(CounterWarning, match="self.calls changes on every call"):
        for i in range(1, 13):
            torch.testing.assert_close(jm(x), m.lin(x) * i)
            assert m.calls == i
    assert primtrace.cache_info(jm).misses == COUNTER_MISSES


def test_a_number_toggling_between_a_few_values_stays_compiled():
    class Mode(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = 1

        def forward(self, x):
            return x * self.scale
    m = Mode()
    jm = primtrace.jit(m)
    x = torch.ones(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i in range(12):
            m.scale = i % 3
            assert jm(x).tolist() == [i % 3] * 2
    assert primtrace.cache_info(jm).misses == 3
