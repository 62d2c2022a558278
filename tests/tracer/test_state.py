"""State a jitted function reads besides its arguments: parameters, buffers, tensors and
Python values in modules, globals and closures are read again on every call, and a change
is seen (by a guard and a recompile) instead of returning a stale result."""
import copy
import itertools

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import primtrace
from primtrace.tracer import TracingError

pytestmark = [pytest.mark.filterwarnings("ignore::primtrace.OpaqueOpWarning"),
              pytest.mark.usefixtures("both_hit_paths")]


class Block(nn.Module):
    def __init__(self, dropout=0.5):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, 8), nn.Linear(8, 3)
        self.drop = nn.Dropout(dropout)
        self.register_buffer("shift", torch.zeros(3))
        self.scale = 1.5

    def forward(self, x):
        return (self.fc2(self.drop(F.gelu(self.fc1(x)))) + self.shift) * self.scale


def pair(module):
    """A module and an identical copy for eager to run."""
    return module, copy.deepcopy(module)


def check(jm, eager, x, grads=True):
    torch.manual_seed(0)
    got = jm(x)
    torch.manual_seed(0)
    expected = eager(x)
    torch.testing.assert_close(got, expected)
    assert got.requires_grad == expected.requires_grad
    if grads and expected.requires_grad:
        got.square().sum().backward()
        expected.square().sum().backward()
        ours = dict(jm.named_parameters())
        for name, p in eager.named_parameters():
            if p.grad is None:
                assert ours[name].grad is None, name
                continue
            assert ours[name].grad is not None, name
            torch.testing.assert_close(ours[name].grad, p.grad, msg=name)
            ours[name].grad, p.grad = None, None


def test_parameters_are_inputs_and_get_gradients():
    m, eager = pair(Block(dropout=0.0))
    jm = primtrace.jit(m)
    check(jm, eager, torch.randn(4, 6))
    trace = primtrace.last_traces(jm)[0]
    assert [p.name for p in trace.inputs] == ["x", "fc1_weight", "fc1_bias", "fc2_weight",
                                              "fc2_bias", "shift"]


@pytest.mark.parametrize("change", [
    "eval", "train_again", "reassign_parameter", "attribute", "inplace_update", "buffer_rebind",
    "replace_submodule", "forward_hook", "requires_grad_off"])
def test_state_changes_after_the_first_call_are_seen(change):
    m, eager = pair(Block())
    jm = primtrace.jit(m)
    x = torch.randn(4, 6)
    check(jm, eager, x)
    for module in (m, eager):
        torch.manual_seed(1)
        if change == "eval":
            module.eval()
        elif change == "train_again":
            module.eval()
            module.train()
        elif change == "reassign_parameter":
            module.fc1.weight = nn.Parameter(torch.randn(8, 6))
        elif change == "attribute":
            module.scale = 3.0
        elif change == "inplace_update":
            with torch.no_grad():
                module.fc2.weight.mul_(2)
                module.shift.add_(1)
        elif change == "buffer_rebind":
            module.shift = torch.full((3,), 2.0)
        elif change == "replace_submodule":
            module.fc2 = nn.Linear(8, 3)
        elif change == "forward_hook":
            module.fc1.register_forward_hook(lambda mod, inp, out: out * 2)
        elif change == "requires_grad_off":
            module.fc1.requires_grad_(False)
    check(jm, eager, x)
    if change == "eval":
        torch.testing.assert_close(jm(x), jm(x))    # dropout is off


def test_switching_between_train_and_eval_reuses_both_compiles():
    m = Block()
    jm = primtrace.jit(m)
    x = torch.randn(4, 6)
    for mode in (True, False, True, False):
        m.train(mode)
        jm(x)
    info = primtrace.cache_info(jm)
    assert (info.misses, info.hits) == (2, 2)


def test_jit_of_a_module_forwards_attributes_to_it():
    m = Block()
    jm = primtrace.jit(m)
    assert jm.eval() is jm and not m.training   # nn.Module's chaining: the jitted view stays
    assert list(jm.parameters()) == list(m.parameters())
    with pytest.raises(TypeError, match="function or an nn.Module, got int"):
        primtrace.jit(42)


W = torch.randn(5)
SCALE = 2.0


def uses_globals(x):
    return x * W + SCALE


def test_rebinding_globals_is_seen():
    global W, SCALE
    jf = primtrace.jit(uses_globals)
    x = torch.randn(5)
    torch.testing.assert_close(jf(x), uses_globals(x))
    old = W, SCALE
    try:
        W = torch.randn(5)
        torch.testing.assert_close(jf(x), uses_globals(x))
        SCALE = -1.0
        torch.testing.assert_close(jf(x), uses_globals(x))
    finally:
        W, SCALE = old


def test_rebinding_a_closure_variable_is_seen():
    w, k = torch.randn(3), 2

    def f(x):
        return x * w + k
    jf = primtrace.jit(f)
    x = torch.randn(3)
    torch.testing.assert_close(jf(x), f(x))
    w, k = torch.randn(3), 5
    torch.testing.assert_close(jf(x), f(x))


def helper_scale():
    return SCALE * 2     # never calls torch: found through the caller's globals


def uses_helper(x):
    return x * helper_scale()


def test_globals_of_helpers_that_never_call_torch_are_guarded_too():
    global SCALE
    jf = primtrace.jit(uses_helper)
    x = torch.randn(3)
    torch.testing.assert_close(jf(x), uses_helper(x))
    old, SCALE = SCALE, 7.0
    try:
        torch.testing.assert_close(jf(x), uses_helper(x))
    finally:
        SCALE = old


class Config:
    def __init__(self):
        self.clip, self.activation = 1.0, "tanh"


CONFIG = Config()


def uses_config(x):
    y = x.clamp(-CONFIG.clip, CONFIG.clip)
    return torch.tanh(y) if CONFIG.activation == "tanh" else torch.relu(y)


def test_attributes_of_a_global_config_object_are_guarded():
    jf = primtrace.jit(uses_config)
    x = 3 * torch.randn(6)
    torch.testing.assert_close(jf(x), uses_config(x))
    CONFIG.clip, CONFIG.activation = 2.0, "relu"
    try:
        torch.testing.assert_close(jf(x), uses_config(x))
    finally:
        CONFIG.clip, CONFIG.activation = 1.0, "tanh"


def test_module_lists_and_tied_weights():
    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))
            self.head = nn.Linear(4, 4)
            self.head.weight = self.layers[0].weight    # tied

        def forward(self, x):
            for layer in self.layers:
                x = torch.tanh(layer(x))
            return self.head(x)
    m, eager = pair(Stack())
    jm = primtrace.jit(m)
    x = torch.randn(2, 4)
    check(jm, eager, x)
    for module in (m, eager):
        torch.manual_seed(3)
        module.layers[1] = nn.Linear(4, 4)
    check(jm, eager, x)


def test_gradients_of_inputs_are_state_read_per_call():
    def sgd_step(params, lr):
        with torch.no_grad():
            for p in params:
                p.sub_(p.grad * lr)
    params = [torch.randn(3, requires_grad=True) for _ in range(2)]
    ref = [p.detach().clone().requires_grad_() for p in params]
    step = primtrace.jit(sgd_step)
    for i in range(3):
        for p, r in zip(params, ref):
            p.grad = torch.full((3,), float(i + 1))
            r.grad = p.grad.clone()
        step(params, 0.1)
        sgd_step(ref, 0.1)
        for p, r in zip(params, ref):
            torch.testing.assert_close(p, r, rtol=0, atol=0)


def test_a_plain_module_attribute_assigned_while_tracing_is_replayed_after_each_call():
    """``self.last = x * 2`` (spectral_norm's pre-hook assigns ``module.weight``): set after
    each call to that call's value, as eager, and never left holding a proxy."""
    class Caching(nn.Module):
        def forward(self, x):
            self.last = x * 2
            return self.last
    m = Caching()
    jm = primtrace.jit(m)
    for _ in range(3):
        x = torch.randn(2)
        y = jm(x)
        assert m.last is y and type(y) is torch.Tensor
        torch.testing.assert_close(y, x * 2)
    assert primtrace.cache_info(jm).misses == 1


def test_python_side_effects_while_tracing_raise_and_leave_the_module_as_it_was():
    class Swaps(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("b", torch.zeros(2))

        def forward(self, x):
            self.b = x * 2          # a proxy must not outlive the trace
            return self.b
    m = Swaps()
    with pytest.raises(TracingError, match="Swaps.b was assigned while tracing"):
        primtrace.jit(m)(torch.randn(2))
    assert type(m.b) is torch.Tensor and not m.b.any()


def test_backward_inside_a_jitted_function_is_a_clear_error():
    lin = nn.Linear(3, 1)

    def step(x):
        loss = lin(x).sum()
        loss.backward()
        return loss
    with pytest.raises(TracingError, match="backward outside"):
        primtrace.jit(step)(torch.randn(2, 3))


def test_a_module_made_by_the_traced_code_is_not_state():
    """``loss_fct = nn.CrossEntropyLoss()`` inside forward (transformers' heads): the new
    module's attributes, written by its __init__ and read by its forward, are not state
    (it raised 'CrossEntropyLoss.reduction was assigned while tracing'); storing it on the
    traced module still is a side effect."""
    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(6, 4)

        def forward(self, x, labels):
            loss_fct = nn.CrossEntropyLoss(label_smoothing=0.1)
            return loss_fct(self.fc(x), labels)

    torch.manual_seed(0)
    m = Head()
    jm = primtrace.jit(m)
    labels = torch.tensor([0, 3, 1])
    for _ in range(2):
        x = torch.randn(3, 6)
        got, want = jm(x, labels), m(x, labels)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(torch.autograd.grad(got, m.fc.weight),
                                   torch.autograd.grad(want, m.fc.weight))
    assert primtrace.cache_info(jm).misses == 1

    class Keeps(nn.Module):
        def forward(self, x):
            self.act = nn.ReLU()
            return self.act(x)
    with pytest.raises(TracingError, match="Keeps.act was assigned while tracing"):
        primtrace.jit(Keeps())(torch.randn(3))


_READS = itertools.count()   # C state: not Python state a trace would see written


class _CountingConfig:
    """A config whose class reads attributes in Python (as transformers' configs do)."""

    def __init__(self):
        self.scale, self.shift, self.names = 2.0, 1.0, ["a", "b"]

    def __getattribute__(self, name):
        next(_READS)
        return super().__getattribute__(name)


def test_the_guard_reads_a_plain_objects_attributes_through_one_dict_access():
    """Every attribute of a config the code reads is checked, but its __dict__ is fetched
    once per call, not once per attribute through the class's Python __getattribute__."""
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.config = _CountingConfig()

        def forward(self, x):
            return x * self.config.scale + self.config.shift

    m = Scaled()
    jm = primtrace.jit(m)
    x = torch.ones(3)
    jm(x)
    before = next(_READS)
    assert torch.equal(jm(x), x * 2 + 1)
    assert next(_READS) - before - 1 == 1
    m.config.shift = 5.0   # still seen
    assert torch.equal(jm(x), x * 2 + 5)
