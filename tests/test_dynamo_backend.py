"""The torch.compile backend: Dynamo's graphs through primtrace.jit, matching eager."""
import importlib.metadata
import warnings

import copy

import pytest
import torch
import torch._dynamo

import primtrace
from primtrace.dynamo import CompiledGraph, dynamo_backend, register
from primtrace.executors import FusionExecutor, default_executors

pytestmark = pytest.mark.filterwarnings("ignore::primtrace.OpaqueOpWarning")


class Block(torch.nn.Module):
    """Linear, GELU, Dropout (eval), residual add, LayerNorm, SiLU-style gate, residual add."""

    def __init__(self, d=8, hidden=16):
        super().__init__()
        self.up, self.act = torch.nn.Linear(d, hidden), torch.nn.GELU()
        self.drop, self.down = torch.nn.Dropout(0.25), torch.nn.Linear(hidden, d)
        self.norm = torch.nn.LayerNorm(d)

    def forward(self, x):
        h = self.down(self.drop(self.act(self.up(x))))
        y = self.norm(x + h)
        return y * torch.sigmoid(y) + x


def block(seed=0):
    torch.manual_seed(seed)
    return Block().eval()


def inputs(*shape, seed=1):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def assert_matches(actual, expected):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


def node_kinds(trace):
    return {n.symbol.kind for n in trace.nodes}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_by_callable_matches_eager_and_runs_through_primtrace():
    model = block()
    compiled = torch.compile(model, backend=dynamo_backend)
    with torch.no_grad():
        for shape in [(4, 8), (4, 8), (2, 5, 8)]:
            x = inputs(*shape)
            assert_matches(compiled(x), model(x))
    graph = dynamo_backend.last_graph()
    assert isinstance(graph, CompiledGraph) and graph.fallback_reason is None
    acquisition, prims, _, execution = dynamo_backend.last_traces()
    names = {n.symbol.qualname for n in acquisition.nodes}
    # elementwise ops, layer_norm and linear became refs
    assert {"refs.nn.functional.gelu", "refs.add", "refs.sigmoid", "refs.mul",
            "refs.nn.functional.layer_norm", "refs.nn.functional.linear"} <= names
    assert "prim" in node_kinds(prims) and "ref" not in node_kinds(prims)
    # parameters are trace inputs (Dynamo lifts them), named readably
    assert {"up_weight", "down_bias", "norm_weight"} <= {p.name for p in acquisition.inputs}
    assert all(n.executor is not None for n in execution.nodes)


def test_by_name_matches_eager():
    register()
    register()  # idempotent
    assert torch._dynamo.lookup_backend("primtrace") is dynamo_backend
    assert "primtrace" in torch._dynamo.list_backends()
    model, x = block(1), inputs(3, 8)
    with torch.no_grad():
        assert_matches(torch.compile(model, backend="primtrace")(x), model(x))
    assert dynamo_backend.last_graph().fallback_reason is None


def test_entry_point_names_the_backend():
    (ep,) = importlib.metadata.entry_points(group="torch_dynamo_backends").select(name="primtrace")
    assert ep.load() is dynamo_backend


def test_exported_from_the_package():
    assert primtrace.dynamo_backend is dynamo_backend


def test_traces_are_public_like_jits():
    with pytest.raises(RuntimeError, match="has run yet"):
        primtrace.dynamo.last_traces()              # nothing since torch._dynamo.reset()
    model, x = block(2), inputs(3, 8)
    with torch.no_grad():
        torch.compile(model, backend="primtrace")(x)
    traces = primtrace.dynamo.last_traces()
    (graph,) = primtrace.dynamo.graphs()
    assert len(traces) == 4 and all(a is b for a, b in zip(traces, primtrace.last_traces(graph.jit)))
    assert primtrace.dynamo.last_trace() is traces[-1] and graph.fallback_reason is None
    assert "# acquisition trace" in str(traces[0]) and "# execution trace" in str(traces[-1])


def test_dynamo_module_is_reachable_from_import_primtrace_without_importing_dynamo():
    import subprocess
    import sys
    code = ("import sys, primtrace; print(primtrace.dynamo.graphs(), "
            "'torch._dynamo' in sys.modules, 'primtrace.dynamo' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["[]", "False", "True"]


def test_by_name_after_import_primtrace_without_the_entry_point():
    """A checkout that is not pip-installed has no entry point: ``import primtrace`` registers
    the name once torch._dynamo is imported (an import hook), or at once if it already is."""
    import subprocess
    import sys
    hide = ("import importlib.metadata as md\n"
            "_eps = md.entry_points\n"
            "def entry_points(**kw):\n"
            "    found = _eps(**kw)\n"
            "    if kw.get('group') == 'torch_dynamo_backends':\n"
            "        return md.EntryPoints([e for e in found if e.name != 'primtrace'])\n"
            "    return found\n"
            "md.entry_points = entry_points\n")
    run = ("import sys, torch\n{first}\n"
           "print('torch._dynamo' in sys.modules)\n"
           "f = torch.compile(lambda x: x.sin() + 1, backend='primtrace')\n"
           "x = torch.randn(4)\n"
           "print(torch.allclose(f(x), x.sin() + 1), primtrace.dynamo.last_trace() is not None)\n")
    for first, dynamo_loaded in (("import primtrace", "False"),
                                 ("import torch._dynamo, primtrace", "True")):
        code = hide + run.format(first=first)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.split() == [dynamo_loaded, "True", "True"]


def test_is_compiling_under_the_backend_is_dynamos():
    """Dynamo folds torch.compiler.is_compiling() to True in the graph it captures; the
    primtrace tracer's own answer (True while tracing) does not disturb that."""
    def f(x):
        return x + 1 if torch.compiler.is_compiling() else x - 1
    x = torch.randn(4)
    with torch.no_grad():
        assert_matches(torch.compile(f, backend=dynamo_backend)(x), x + 1)
    assert not torch.compiler.is_compiling()


def fused(trace):
    return [n for n in trace.nodes if n.symbol.kind == "fused"]


def test_fusion_executor_gives_fused_regions_and_matches_eager():
    from primtrace.executors.numba import NumbaFusionExecutor
    model, x = block(2), inputs(4, 8)
    compiled = torch.compile(model, backend=dynamo_backend,
                             options={"executors": [NumbaFusionExecutor(cost_model=False)]})
    with torch.no_grad():
        assert_matches(compiled(x), model(x))
    regions = fused(dynamo_backend.last_traces()[-1])
    assert len(regions) >= 2  # GELU; the gate and residual after layer_norm
    assert all(n.symbol.name.startswith("numba_fusion_") and n.subnodes for n in regions)
    gelu = next(r for r in regions if any(s.symbol.name == "erf" for s in r.subnodes))
    assert len(gelu.subnodes) >= 5


def test_default_executors_fuse():
    model, x = block(3), inputs(4, 8)
    with torch.no_grad():
        assert_matches(torch.compile(model, backend=dynamo_backend)(x), model(x))
    regions = fused(dynamo_backend.last_traces()[-1])   # F.gelu alone runs as torch's gelu
    assert len(regions) >= 1 and all(n.symbol.name.startswith("numba_fusion_") for n in regions)


def test_inference_mode_and_new_batch_sizes():
    model = block(4)
    compiled = torch.compile(model, backend=dynamo_backend)
    with torch.inference_mode():
        for n in (2, 5, 9):  # the later sizes reach a graph with a symbolic batch size
            x = inputs(n, 8, seed=n)
            assert_matches(compiled(x), model(x))
            assert dynamo_backend.last_graph().fallback_reason is None
    assert len(dynamo_backend.graphs()) == 2  # static, then dynamic batch size


def test_grad_mode_is_differentiated_by_primtrace_with_correct_gradients():
    model = block(5)
    compiled = torch.compile(model, backend=dynamo_backend)
    x = inputs(3, 8)
    out = compiled(x)
    assert out.requires_grad
    graph = dynamo_backend.last_graph()
    assert graph.fallback_reason is None and "backward" in graph.last_traces()[-1].tags
    out.sum().backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for g, p in zip(got, model.parameters()):
        torch.testing.assert_close(g, p.grad)


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8))
        self.register_buffer("b", torch.randn(8))

    def forward(self, x):
        return torch.nn.functional.gelu(x * self.w + self.b) + self.w


def test_get_attr_tensors_become_inputs_read_at_each_call():
    torch.manual_seed(6)
    gm = torch.fx.symbolic_trace(Scaled())
    assert any(n.op == "get_attr" for n in gm.graph.nodes)
    graph = dynamo_backend(gm, [])
    x = inputs(3, 8)
    with torch.no_grad():
        assert_matches(graph(x), gm(x))
        assert {"attr_w", "attr_b"} <= {p.name for p in graph.last_traces()[0].inputs}
        gm.w = torch.nn.Parameter(torch.randn(8))  # a new value, not an in-place update
        assert_matches(graph(x), gm(x))
    assert graph.jit.cache_info().misses == 1


def test_aten_ops_reach_refs():
    aten = torch.ops.aten

    def f(x, y):
        return aten.mul.Tensor(aten.gelu.default(aten.add.Tensor(x, y)), aten.mm.default(x, y))
    graph = dynamo_backend(torch.fx.symbolic_trace(f), [])
    x, y = inputs(3, 3, seed=1), inputs(3, 3, seed=2)
    assert_matches(graph(x, y), f(x, y))
    acquisition = graph.last_traces()[0]
    kinds = {n.symbol.name: n.symbol.kind for n in acquisition.nodes}
    assert kinds["add"] == kinds["gelu"] == kinds["mul"] == kinds["mm"] == "ref"
    assert "opaque" not in kinds.values()


def test_call_method_and_operator_targets():
    def f(x, y):
        return (x.sigmoid() * y).tanh() - x.exp().neg()
    graph = dynamo_backend(torch.fx.symbolic_trace(f), [])
    assert any(n.op == "call_method" for n in graph.graph_module.graph.nodes)
    x, y = inputs(4, 4, seed=3), inputs(4, 4, seed=4)
    assert_matches(graph(x, y), f(x, y))
    assert {n.symbol.kind for n in graph.last_traces()[0].nodes} == {"ref"}


class Autocast(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = self.lin(x)
        return torch.relu(y) + 1


def test_autocast_graph_is_traced_with_its_casts():
    """An autocast region inside the model (``_enter_autocast`` nodes in Dynamo's graph) is
    traced with autocast's casts; so is a call under autocast: eager's dtypes and values."""
    torch.manual_seed(7)
    model, x = Autocast().eval(), inputs(2, 8)
    with torch.no_grad():
        out = torch.compile(model, backend=dynamo_backend)(x)
        want = model(x)
        assert out.dtype == want.dtype == torch.bfloat16
        torch.testing.assert_close(out, want)
    graph = dynamo_backend.last_graph()
    assert graph.fallback_reason is None
    assert "convert_element_type" in str(graph.last_traces()[1])


def test_training_under_autocast():
    torch.manual_seed(7)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4),
                                torch.nn.LayerNorm(4))
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend=dynamo_backend)
    for _ in range(2):
        x = inputs(3, 8)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            got, want = compiled(x), eager(x)
        assert got.dtype == want.dtype == torch.bfloat16
        torch.testing.assert_close(got, want)
        got.float().pow(2).sum().backward()
        want.float().pow(2).sum().backward()
        for p, e in zip(model.parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, e.grad, rtol=2e-2, atol=1e-3)
    graph = dynamo_backend.last_graph()
    assert graph.fallback_reason is None
    assert "convert_element_type" in str(graph.last_traces()[1])


def test_untraceable_graph_warns_and_runs_eagerly():
    def f(x):
        # aten's unique_dim has no meta function (torch.unique traces: a data-dependent size)
        return torch.ops.aten.unique_dim.default(x.add(1), 0)[0]
    graph = dynamo_backend(torch.fx.symbolic_trace(f), [])
    x = torch.tensor([0.0, -1.0, 2.0])
    with pytest.warns(RuntimeWarning, match="eager"):
        torch.testing.assert_close(graph(x), f(x))
    assert "cannot trace" in graph.fallback_reason
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(graph(x), f(x))  # decided once: no warning, no retrace


def test_compile_modes_are_rejected():
    with pytest.raises(ValueError, match="no compile modes"):
        dynamo_backend(torch.fx.symbolic_trace(lambda x: x + 1), [], mode="max-autotune")


def test_a_growing_kv_cache_runs_one_trace_per_graph():
    """Dynamo makes the cache's length symbolic on its second size (a graph with SymInt
    inputs); the backend traces those dims symbolic from that graph's first call, and the
    graph's size inputs read them (`torch.sym_sum` on them too): one trace per graph."""
    from tests.tracer.test_state_dynamic import attend, decode
    torch._dynamo.reset()
    w = torch.randn(8, 24) / 3
    step = torch.compile(attend, backend="primtrace")
    want, _ = decode(attend, w, 10)
    got, _ = decode(step, w, 10)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)
    graphs = primtrace.dynamo.graphs()
    assert [primtrace.cache_info(g.jit).misses for g in graphs] == [1] * len(graphs)
    assert any(g.jit._dynamic.marks for g in graphs)
