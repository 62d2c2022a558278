"""Module code primtrace traces by an equivalent (primtrace/tracer/module_calls.py), compared
with eager over several calls: outputs, gradients and the module's state after each."""
import copy

import pytest
import torch
import torch.nn as nn

import primtrace


def _same_state(m, e, f64=None):
    """The module's state and grads are eager's; with a float64 copy `f64`, a grad that
    differs is at least as close to its as eager's is (grads summed over calls differ in the
    last bits where the backward rounds in another order)."""
    refs = f64.state_dict(keep_vars=True).values() if f64 is not None else iter(lambda: None, 0)
    for (name, a), (_, b), r in zip(m.state_dict(keep_vars=True).items(),
                                    e.state_dict(keep_vars=True).items(), refs):
        torch.testing.assert_close(a, b, msg=name)
        if getattr(a, "grad", None) is not None or getattr(b, "grad", None) is not None:
            _as_close_as_eager(a.grad, b.grad, getattr(r, "grad", None), f"{name}.grad")


def _as_close_as_eager(got, eager, f64, what: str):
    try:
        torch.testing.assert_close(got, eager, msg=what)
    except AssertionError:
        if f64 is None:
            raise
        ours, theirs = ((t.double() - f64).abs().max().item() for t in (got, eager))
        assert ours <= theirs, f"{what}: off float64 by {ours}, eager by {theirs}"


def _run(module, shape, calls=3, eval_after=None):
    """The module jitted, an eager copy and a float64 one, called `calls` times on the same
    inputs."""
    torch.manual_seed(0)
    eager, f64 = copy.deepcopy(module), copy.deepcopy(module).double()
    jitted = primtrace.jit(module)
    for i in range(calls):
        if i == eval_after:
            module.eval(), eager.eval(), f64.eval()
        x = torch.randn(*shape, requires_grad=True)
        xe, xd = x.detach().clone().requires_grad_(), x.detach().double().requires_grad_()
        y, ye, yd = jitted(x), eager(xe), f64(xd)
        torch.testing.assert_close(y, ye)
        y.square().sum().backward(), ye.square().sum().backward(), yd.square().sum().backward()
        _as_close_as_eager(x.grad, xe.grad, xd.grad, "input grad")
        _same_state(module, eager, f64)
    return jitted


@pytest.mark.parametrize("cls, shape", [(nn.BatchNorm1d, (8, 4)), (nn.BatchNorm1d, (6, 4, 5)),
                                        (nn.BatchNorm2d, (4, 4, 3, 3))])
def test_batch_norm_with_a_cumulative_average_is_traced_once_for_every_call(cls, shape):
    """momentum=None: eager's factor is 1 / float(num_batches_tracked), a new value on every
    call; the trace computes it from the buffer."""
    jitted = _run(cls(4, momentum=None), shape, calls=4, eval_after=3)
    assert primtrace.cache_info(jitted).misses == 2   # training, then eval


@pytest.mark.parametrize("make, shape", [
    (lambda: nn.utils.parametrizations.spectral_norm(nn.Linear(4, 4)), (2, 4)),
    (lambda: nn.utils.parametrizations.spectral_norm(nn.Conv2d(3, 4, 3), dim=1), (2, 3, 5, 5)),
    (lambda: nn.utils.spectral_norm(nn.Linear(4, 4)), (2, 4)),
    (lambda: nn.utils.spectral_norm(nn.Conv2d(3, 4, 3)), (2, 3, 5, 5)),
], ids=["linear", "conv dim 1", "old linear", "old conv"])
def test_spectral_norm_updates_its_vectors_as_eager(make, shape):
    """The power iteration writes _u and _v in place (F.normalize(..., out=self._u)) and
    assigns them back: the same tensor, which is no side effect."""
    torch.manual_seed(0)
    jitted = _run(make(), shape, calls=4, eval_after=3)
    assert primtrace.cache_info(jitted).misses == 2


def test_assigning_another_tensor_to_a_buffer_still_raises():
    class Swaps(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("b", torch.zeros(3))

        def forward(self, x):
            self.b = self.b + x
            return self.b
    m = Swaps()
    with pytest.raises(primtrace.TracingError, match="Swaps.b was assigned while tracing"):
        primtrace.jit(m)(torch.ones(3))
    assert type(m.b) is torch.Tensor and not m.b.any()


def test_old_spectral_norm_assigns_the_weight_on_every_call_as_eager():
    """torch.nn.utils.spectral_norm's pre-hook assigns ``module.weight`` (a plain attribute)
    and writes _u and _v in place: the assignment is replayed with each call's weight."""
    torch.manual_seed(0)
    module = nn.utils.spectral_norm(nn.Linear(4, 4))
    eager = copy.deepcopy(module)
    jitted = primtrace.jit(module)
    for i in range(4):
        if i == 3:
            module.eval(), eager.eval()
        x = torch.randn(2, 4)
        torch.testing.assert_close(jitted(x), eager(x))
        torch.testing.assert_close(module.weight, eager.weight)
        assert type(module.weight) is torch.Tensor
        _same_state(module, eager)
    assert primtrace.cache_info(jitted).misses == 2


def _hooked(make, where, kinds):
    """The module, an eager copy, and what their hooks saw (lists of tuples)."""
    module = make()
    eager = copy.deepcopy(module)
    logs = []
    for m in (module, eager):
        log, target = [], where(m)
        if "full" in kinds:
            target.register_full_backward_hook(lambda mod, gi, go, log=log: log.append(("full", gi, go)))
        if "pre" in kinds:
            target.register_full_backward_pre_hook(lambda mod, go, log=log: log.append(("pre", go)))
        logs.append(log)
    return module, eager, logs


@pytest.mark.parametrize("make, where, kinds", [
    (lambda: nn.Linear(4, 4), lambda m: m, ["full"]),
    (lambda: nn.Linear(4, 4), lambda m: m, ["pre"]),
    (lambda: nn.Linear(4, 4), lambda m: m, ["full", "pre"]),
    (lambda: nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 4)), lambda m: m[1], ["full", "pre"]),
    (lambda: nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 4)), lambda m: m[0], ["full"]),
], ids=["full", "pre", "both", "submodule", "first submodule"])
def test_module_backward_hooks_see_eagers_gradients(make, where, kinds):
    torch.manual_seed(0)
    module, eager, (got, expected) = _hooked(make, where, kinds)
    jitted = primtrace.jit(module)
    for _ in range(3):
        x = torch.randn(2, 4, requires_grad=True)
        xe = x.detach().clone().requires_grad_()
        y, ye = jitted(x), eager(xe)
        torch.testing.assert_close(y, ye)
        y.square().sum().backward(), ye.square().sum().backward()
        torch.testing.assert_close(x.grad, xe.grad)
        _same_state(module, eager)
    assert len(got) == len(expected) == 3 * len(kinds)
    for g, e in zip(got, expected):
        assert g[0] == e[0]
        torch.testing.assert_close(g[1:], e[1:])
    assert primtrace.cache_info(jitted).misses == 1
    why = primtrace.explain(jitted, torch.randn(2, 4, requires_grad=True)).fallback
    assert why == f"a module backward hook on {type(where(module)).__name__} (autograd runs the hook)"


def test_module_backward_hooks_without_grad_and_two_calls_in_one_backward():
    torch.manual_seed(0)
    module, eager, (got, expected) = _hooked(lambda: nn.Linear(4, 4), lambda m: m, ["full"])
    jitted = primtrace.jit(module)
    x = torch.randn(2, 4)
    with torch.no_grad():
        torch.testing.assert_close(jitted(x), eager(x))
    assert got == expected == []
    a, b = torch.randn(2, 4, requires_grad=True), torch.randn(2, 4, requires_grad=True)
    (jitted(a).sum() + 2 * jitted(b).sum()).backward()
    (eager(a).sum() + 2 * eager(b).sum()).backward()
    assert len(got) == len(expected) == 2
    for g, e in zip(got, expected):
        torch.testing.assert_close(g[1:], e[1:])


ACTIVATIONS = {}


def _saving(name):
    def hook(module, inputs, output):
        ACTIVATIONS[name] = output.detach()
    return hook


def test_forward_hooks_run_on_every_call_with_their_writes_replayed():
    """Forward hooks are traced inline: one that changes the output is in the trace; writes
    of ones that save values (a global dict through a closure, a list as a default
    argument) are replayed after each call, as eager's run."""
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 4))
    eager = copy.deepcopy(module)
    seen = {}
    for key, m in (("jit", module), ("eager", eager)):
        log = seen[key] = []
        m[1].register_forward_hook(_saving(key))
        m[0].register_forward_pre_hook(lambda mod, args, log=log: log.append(args[0].sum()))
        m[2].register_forward_hook(lambda mod, args, out: out * 2)
    jitted = primtrace.jit(module)
    for i in range(3):
        x = torch.randn(2, 4)
        torch.testing.assert_close(jitted(x), eager(x))
        torch.testing.assert_close(ACTIVATIONS["jit"], ACTIVATIONS["eager"])
        assert type(ACTIVATIONS["jit"]) is torch.Tensor
        assert len(seen["jit"]) == len(seen["eager"]) == i + 1
        torch.testing.assert_close(seen["jit"], seen["eager"])
    assert primtrace.cache_info(jitted).misses == 2   # the dict's keys, guarded, changed once


def test_old_weight_norm_recomputes_the_weight_on_every_call_as_eager():
    """torch.nn.utils.weight_norm's pre-hook assigns ``module.weight`` (a plain attribute)
    from weight_g and weight_v: replayed after each call, gradients as eager's."""
    def make():
        torch.manual_seed(0)
        return nn.utils.weight_norm(nn.Linear(4, 3))   # not deep-copyable: built twice
    module, eager = make(), make()
    jitted = primtrace.jit(module)
    for _ in range(3):
        x = torch.randn(2, 4)
        y, ye = jitted(x), eager(x)
        torch.testing.assert_close(y, ye)
        y.square().sum().backward(), ye.square().sum().backward()
        torch.testing.assert_close(module.weight, eager.weight)
        with torch.no_grad():
            for p, q in zip(module.parameters(), eager.parameters()):
                torch.testing.assert_close(p.grad, q.grad)
                p -= 0.1 * p.grad
                q -= 0.1 * q.grad
    assert primtrace.cache_info(jitted).misses == 1
