"""The executor API: claiming, priority, checkers, fusion regions, lowering and codegen."""
import contextlib
import warnings

import pytest
import torch

import primtrace
from primtrace import prims
from primtrace.executors import FusionExecutor, OperatorExecutor, Region, dependency_graph
from primtrace.executors.execution_trace import LoweringError, lower


def w2(a, b, c):
    y = torch.exp(torch.sin(a) * b + 0.5).clamp(max=4)
    return torch.where(y > 1, y, torch.rsqrt(y.abs() + 1e-6)) + c


def w2_inputs(n=16):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(n, generator=g).half(), torch.randn(n, generator=g),
            torch.randint(-3, 3, (n,), dtype=torch.int32, generator=g))


class TorchFusion(FusionExecutor):
    """A fusion executor for tests: runs a region's prims one after another with torch."""
    name = "torchfuse"

    def __init__(self, fusible=lambda node: "elementwise" in node.symbol.tags):
        self.fusible, self.compiled = fusible, []

    def can_fuse(self, node):
        return self.fusible(node)

    def compile(self, region):
        self.compiled.append(region)

        def run(*values):
            env = {p.name: v for p, v in zip(region.inputs, values)}

            def value(x):
                if isinstance(x, primtrace.ir.Proxy):
                    return env[x.name]
                if isinstance(x, (tuple, list)):
                    return type(x)(value(v) for v in x)
                return x
            for node in region.nodes:
                out = node.symbol.impl(*value(node.args), **{k: value(v) for k, v in node.kwargs.items()})
                env[node.outputs.name] = out
            return tuple(env[p.name] for p in region.outputs)
        return run


def claimed_once(execution, optimized):
    """Every optimized node is run by exactly one executor in the execution trace."""
    def key(node):
        return node.symbol.name, tuple(p.name for p in node.output_proxies)
    seen = []
    for node in execution.nodes:
        assert node.executor is not None
        seen += node.subnodes if node.symbol.kind == "fused" else [node]
    assert sorted(map(key, seen)) == sorted(map(key, optimized.nodes))
    assert len(seen) == len(optimized.nodes)


def test_every_node_is_claimed_by_exactly_one_executor():
    jfn = primtrace.jit(w2)
    jfn(*w2_inputs())
    optimized, execution = primtrace.last_traces(jfn)[2:]
    claimed_once(execution, optimized)
    assert {n.executor.name for n in execution.nodes} == {"torch"}


def test_operator_executor_claims_by_symbol_and_checker_in_priority_order():
    calls = []
    mine = OperatorExecutor("mine")

    def traced_add(a, b):
        calls.append("add")
        return torch.add(a, b)
    mine.register(prims.add, traced_add, checker=lambda a, b: getattr(a, "dtype", None) == torch.float32)
    jfn = primtrace.jit(lambda a, b, c: (a + b, c + 1), executors=[mine])
    a, b, c = torch.randn(3), torch.randn(3), torch.randn(3).double()
    result = jfn(a, b, c)
    torch.testing.assert_close(result[0], a + b)
    adds = [n for n in primtrace.last_trace(jfn).nodes if n.symbol.name == "add"]
    assert [n.executor.name for n in adds] == ["mine", "torch"]  # the checker refused f64
    assert calls == ["add"]
    jfn(a, b, c)
    assert calls == ["add", "add"]  # the cached function calls the registered impl


def test_an_opaque_node_can_be_claimed_by_its_printed_name():
    mine = OperatorExecutor("mine")
    mine.register("torch.logcumsumexp", lambda x, dim: torch.logcumsumexp(x, dim) * 0)
    with quiet():
        jfn = primtrace.jit(lambda x: torch.logcumsumexp(x, dim=0), executors=[mine])
        assert torch.equal(jfn(torch.ones(3)), torch.zeros(3))


@contextlib.contextmanager
def quiet():
    """Opaque-op warnings are expected where these tests use torch.logcumsumexp as a barrier."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def test_fusion_executor_regions_run_and_print_nested():
    fuse = TorchFusion()
    jfn = primtrace.jit(w2, executors=[fuse])
    inputs = w2_inputs()
    torch.testing.assert_close(jfn(*inputs), w2(*inputs), rtol=0, atol=0)
    optimized, execution = primtrace.last_traces(jfn)[2:]
    claimed_once(execution, optimized)
    assert [n.symbol.name for n in execution.nodes] == ["torchfuse_0"]
    fused = execution.nodes[0]
    assert fused.symbol.kind == "fused" and fused.executor is fuse
    assert [p.name for p in fused.args] == [p.name for p in execution.inputs]
    text = str(execution)
    assert "= torchfuse_0(a, b, c)" in text
    assert "    # t0 = prims.convert_element_type(a, torch.float32)" in text


def _trace_of(fn, *args):
    with quiet():
        return primtrace.trace(fn, stage="optimized")(*args)


def test_regions_need_not_be_consecutive():
    def f(a, b):
        s = torch.sin(a)
        c = torch.logcumsumexp(b, 0)  # not fusible, independent of s
        return s * 2, c
    trace = _trace_of(f, torch.randn(4), torch.randn(4))
    regions = TorchFusion().partition(trace)
    assert [[n.symbol.name for n in r.nodes] for r in regions] == [["sin", "mul"]]
    assert [p.name for p in regions[0].inputs] == ["a"]


def test_merging_never_creates_a_cycle_through_an_outside_node():
    def f(a):
        s = torch.sin(a)
        c = torch.logcumsumexp(s, 0)  # s -> c -> add: fusing sin with add would need c inside
        return s + c
    trace = _trace_of(f, torch.randn(4))
    regions = TorchFusion().partition(trace)
    assert sorted([n.symbol.name for n in r.nodes] for r in regions) == [["add"], ["sin"]]
    jfn = primtrace.jit(f, executors=[TorchFusion()])
    a = torch.randn(4)
    with quiet():
        torch.testing.assert_close(jfn(a), f(a))
    names = [n.symbol.name for n in primtrace.last_trace(jfn).nodes]
    assert names == ["torchfuse_0", "logcumsumexp", "torchfuse_1"]


def test_region_outputs_are_values_used_later_or_returned():
    def f(a):
        x = a * 2
        y = x + 1
        return y, torch.logcumsumexp(x, 0)
    trace = _trace_of(f, torch.randn(3))
    (region,) = TorchFusion().partition(trace)
    assert [p.name for p in region.outputs] == [region.nodes[0].outputs.name,
                                                region.nodes[1].outputs.name]
    assert Region.from_nodes(trace, region.nodes) == region


def test_writes_keep_their_order_against_reads():
    def f(a, b):
        before = a * 2      # reads a before the write
        a.put_(torch.tensor([0]), torch.tensor([5.0]))  # opaque write
        return before, a + b
    trace = _trace_of(f, torch.randn(3), torch.randn(3))
    g = dependency_graph(trace)
    order = [trace.nodes[i].symbol.name for i in range(len(trace.nodes))]
    mul, copy = order.index("mul"), order.index("put_")
    assert g.has_edge(mul, copy)
    a, b = torch.randn(3), torch.randn(3)
    ours, theirs = a.clone(), a.clone()
    with quiet():
        result = primtrace.jit(f, executors=[TorchFusion()])(ours, b)
    torch.testing.assert_close(result, f(theirs, b))
    torch.testing.assert_close(ours, theirs)


def test_the_fusion_executor_can_be_limited_by_can_fuse():
    fuse = TorchFusion(fusible=lambda n: n.symbol.name in ("sin", "exp"))
    jfn = primtrace.jit(w2, executors=[fuse])
    inputs = w2_inputs()
    torch.testing.assert_close(jfn(*inputs), w2(*inputs), rtol=0, atol=0)
    optimized, execution = primtrace.last_traces(jfn)[2:]
    claimed_once(execution, optimized)
    fused = [n for n in execution.nodes if n.symbol.kind == "fused"]
    assert [[s.symbol.name for s in n.subnodes] for n in fused] == [["sin"], ["exp"]]
    assert [n.symbol.name for n in fused] == ["torchfuse_0", "torchfuse_1"]


def test_lowering_rejects_a_region_that_hides_a_needed_output():
    class Forgetful(TorchFusion):
        def partition(self, trace):
            return [Region(r.nodes, r.inputs, []) for r in super().partition(trace)]
    trace = _trace_of(lambda a: torch.sin(a) * 2, torch.randn(3))
    with pytest.raises(LoweringError, match="does not output"):
        lower(trace, [Forgetful(), primtrace.TORCH])


def test_lowering_names_a_node_nobody_claims():
    trace = _trace_of(lambda a: a + 1, torch.randn(3))
    with pytest.raises(LoweringError, match="no executor claims prims.add"):
        lower(trace, [OperatorExecutor("empty")])


def test_torch_executor_is_always_last():
    mine = OperatorExecutor("mine")
    jfn = primtrace.jit(lambda a: a + 1, executors=[primtrace.TORCH, mine])
    assert jfn._executors == [mine, primtrace.TORCH]
    assert primtrace.default_executors()[-1] is primtrace.TORCH


def test_generated_code_is_one_call_per_node():
    jfn = primtrace.jit(w2)
    jfn(*w2_inputs())
    execution = primtrace.last_trace(jfn)
    source = execution.tags["python"]
    body = source.splitlines()[1:-1]
    calls = [line for line in body if not line.strip().startswith("del ")]
    assert len(calls) == len(execution.nodes)
    for line, node in zip(calls, execution.nodes):
        assert f"__pt_{node.symbol.name}" in line
    assert "for " not in source and "while " not in source
