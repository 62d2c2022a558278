"""A state guard skips its dict-decided checks while none of the dicts they read has been
written (tracer/guard_groups.py, primtrace/_dictwatch.c), and checks the state tensors with
one TensorGuards call: every change after the guard went quiet is still seen."""
import collections
import types

import pytest
import torch

import primtrace
from primtrace.tracer import guard_groups

watching = pytest.mark.skipif(not guard_groups._SUPPORTED, reason="no dict version tags here")


@watching
def test_dict_watch_sees_every_write_and_nothing_else():
    from primtrace._dictwatch import DictWatch

    class Box:
        pass
    box, table = Box(), {}
    box.a = 1
    d = box.__dict__
    watch = DictWatch((d, table))
    assert not watch.unchanged()            # nothing recorded yet
    assert watch.record() and watch.unchanged()
    box.a = 1                               # the same object: nothing changed
    assert watch.unchanged()
    for write in (lambda: setattr(box, "a", 2), lambda: setattr(box, "b", 0),
                  lambda: table.update(x=1), lambda: table.pop("x"),
                  lambda: delattr(box, "b"), lambda: object.__setattr__(box, "a", 3)):
        write()
        assert not watch.unchanged()
        watch.record()
    with pytest.raises(TypeError):
        DictWatch(([],))


class Config:
    def __init__(self):
        self.scale, self.shift, self.extra = 2.0, 1, {"bias": 0.5}
        self.sizes = [1, 2]
        self.named = collections.OrderedDict(w=1.0)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.config = Config()
        self.lin = torch.nn.Linear(4, 4)
        self.gain = 1.0

    def forward(self, x):
        c = self.config
        y = self.lin(x) * c.scale + c.shift + c.extra["bias"] + c.sizes[1] + c.named["w"]
        return y * self.gain + OFFSET


OFFSET = 0.0


CHANGES = {
    "config attribute": lambda m: setattr(m.config, "scale", 3.0),
    "config number type": lambda m: setattr(m.config, "shift", 1.0),   # 1 == 1.0
    "nested dict item": lambda m: m.config.extra.update(bias=-1.0),
    "list item": lambda m: m.config.sizes.__setitem__(1, 5),
    "OrderedDict item": lambda m: m.config.named.update(w=4.0),
    "module attribute": lambda m: setattr(m, "gain", -1.0),
    "submodule replaced": lambda m: setattr(m, "lin", torch.nn.Linear(4, 4)),
    "parameter replaced": lambda m: setattr(m.lin, "weight", torch.nn.Parameter(torch.ones(4, 4))),
    "forward hook": lambda m: m.lin.register_forward_hook(lambda mod, i, o: o * 10),
    "global hook": lambda m: torch.nn.modules.module.register_module_forward_hook(
        lambda mod, i, o: o + 100 if isinstance(mod, torch.nn.Linear) else o),
    "global variable": lambda m: globals().__setitem__("OFFSET", 7.0),
    "config's __dict__ replaced": lambda m: setattr(m.config, "__dict__", {
        **m.config.__dict__, "scale": -2.0}),
    "buffer-like resize": lambda m: m.lin.bias.data.resize_(4),   # same metadata: no change
}


def test_state_tensor_metadata_changed_in_place_after_quiet_calls_is_seen():
    """The TensorGuards term: a buffer given new sizes in place (its dict entry unchanged),
    and a parameter frozen (grad mode: the output no longer requires grad)."""
    class Counted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.register_buffer("seen", torch.zeros(4))

        def forward(self, x):
            return self.lin(x) * self.seen.shape[0]

    torch.manual_seed(0)
    model, x = Counted(), torch.randn(3, 4)
    jm = primtrace.jit(model)
    for _ in range(4):
        jm(x)
    model.seen.set_(torch.zeros(8))
    torch.testing.assert_close(jm(x), model(x))
    for p in model.parameters():
        p.requires_grad_(False)
    out = jm(x)
    assert not out.requires_grad and not model(x).requires_grad


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_change_after_many_quiet_calls_is_seen(change):
    global OFFSET
    torch.manual_seed(0)
    model, x = Net(), torch.randn(3, 4)
    jm = primtrace.jit(model)
    handles = []
    try:
        with torch.no_grad():
            for _ in range(4):       # the guard records its dicts' tags, then skips their checks
                torch.testing.assert_close(jm(x), model(x))
            handle = CHANGES[change](model)
            if isinstance(handle, torch.utils.hooks.RemovableHandle):
                handles.append(handle)
            for _ in range(2):
                torch.testing.assert_close(jm(x), model(x))
    finally:
        OFFSET = 0.0
        for h in handles:
            h.remove()


def test_quiet_calls_take_the_fast_terms():
    """Steady calls: the DictWatch says unchanged and TensorGuards passes (else every call
    would run the full checks, correct but as slow as before)."""
    torch.manual_seed(0)
    model, x = Net(), torch.randn(3, 4)
    jm = primtrace.jit(model)
    with torch.no_grad():
        for _ in range(3):
            jm(x)
    guard = jm._recent.guard          # the compiled guard function of the entry served
    namespace = guard.__globals__     # its constants: the watch and the tensor check
    watches = [v for n, v in namespace.items() if n.startswith("watch")]
    tensors = [v for n, v in namespace.items() if n.startswith("tensors_match")]
    assert len(tensors) == 1 and guard([x]) is not None
    assert tensors[0](*guard([x]))
    if guard_groups._SUPPORTED:
        assert len(watches) == 1 and watches[0].unchanged()


def test_a_plain_object_argument_mutated_between_calls_is_seen():
    box = types.SimpleNamespace(k=2.0)

    def f(x, box):
        return x * box.k

    jf, x = primtrace.jit(f), torch.ones(3)
    for _ in range(3):
        assert torch.equal(jf(x, box), x * 2)
    box.k = 5.0
    assert torch.equal(jf(x, box), x * 5)
