"""Pictures of traces: the drawing model (labels, colours, roles), the layout, the files."""
import subprocess
import sys
import warnings

import pytest
import torch

import primtrace
from primtrace.executors import FusionExecutor
from primtrace.ir.draw import GREY, box_size, drawing_model, layout

matplotlib = pytest.importorskip("matplotlib")


class ElementwiseFusion(FusionExecutor):
    """Fuses elementwise prims; runs a region's prims one by one (fast to 'compile')."""
    name = "fuse"

    def can_fuse(self, node):
        return "elementwise" in node.symbol.tags

    def compile(self, region):
        def run(*values):
            env = {p.name: v for p, v in zip(region.inputs, values)}

            def value(x):
                return env[x.name] if isinstance(x, primtrace.ir.Proxy) else x
            for node in region.nodes:
                kwargs = {k: value(v) for k, v in node.kwargs.items()}
                env[node.outputs.name] = node.symbol.impl(*map(value, node.args), **kwargs)
            return tuple(env[p.name] for p in region.outputs)
        return run


def block(x, weight, bias):
    h = torch.nn.functional.gelu(x * 2 + 1)
    y = torch.dist(h, weight) * bias   # torch.dist: an op without a ref
    return torch.sigmoid(y) * y + x, h


@pytest.fixture(scope="module")
def execution():
    jfn = primtrace.jit(block, executors=[ElementwiseFusion()])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", primtrace.OpaqueOpWarning)
        jfn(torch.randn(4, 8), torch.randn(8), torch.randn(8))
    trace = primtrace.last_trace(jfn)
    assert [n.symbol.kind for n in trace.nodes] == ["fused", "opaque", "fused"]
    return trace


def test_model_colours_each_region_and_marks_inputs_and_outputs(execution):
    model = drawing_model(execution)
    fused = [n for n in execution.nodes if n.symbol.kind == "fused"]
    assert list(model.regions) == [n.symbol.name for n in fused] == ["fuse_0", "fuse_1"]
    assert len(set(model.regions.values())) == 2 and GREY not in model.regions.values()
    for node in fused:  # expanded: one box per prim, in its region's colour
        boxes = model.nodes_with(region=node.symbol.name)
        assert sorted(model.graph.nodes[b]["label"].split("\n")[0] for b in boxes) == sorted(
            s.symbol.name for s in node.subnodes)
        assert {model.graph.nodes[b]["color"] for b in boxes} == {model.regions[node.symbol.name]}
        assert model.region_sizes[node.symbol.name] == len(node.subnodes)
    (norm,) = model.nodes_with(role="op", region=None)
    assert model.graph.nodes[norm]["color"] == GREY and model.graph.nodes[norm]["kind"] == "opaque"
    inputs = model.nodes_with(role="input")
    assert [model.graph.nodes[n]["label"].split("\n")[0] for n in inputs] == ["x", "weight", "bias"]
    assert model.graph.nodes[inputs[0]]["label"].split("\n")[1] == "f32[4, 8]"
    outputs = model.nodes_with(role="output")
    assert len(outputs) == 2 and all(model.graph.in_degree(n) == 1 for n in outputs)
    assert all(model.graph.in_degree(n) == 0 for n in inputs)
    # dataflow: dist reads the first region's result and the weight
    sources = {model.graph.nodes[p]["region"] or model.graph.nodes[p]["role"]
               for p in model.graph.predecessors(norm)}
    assert sources == {"fuse_0", "input"}


def test_model_without_expansion_has_one_box_per_fused_node(execution):
    model = drawing_model(execution, expand_fused=False)
    ops = model.nodes_with(role="op")
    assert len(ops) == 3
    assert [model.graph.nodes[n]["label"].split("\n")[0] for n in ops] == ["fuse_0",
                                                                           "dist", "fuse_1"]


def test_layout_flows_down_without_overlaps(execution):
    model = drawing_model(execution)
    positions, bends = layout(model)
    g = model.graph
    for u, v in g.edges:
        ys = [positions[u][1], *(y for _, y in bends[(u, v)]), positions[v][1]]
        assert all(a > b for a, b in zip(ys, ys[1:]))  # every edge goes downward
    rows = {}
    for n, (x, y) in positions.items():
        rows.setdefault(round(y, 6), []).append((x, box_size(g.nodes[n]["label"])[0]))
    for row in rows.values():
        row.sort()
        for (x1, w1), (x2, w2) in zip(row, row[1:]):
            assert x2 - x1 >= (w1 + w2) / 2  # boxes of one row do not overlap


def test_png_is_written_with_region_colours(execution, tmp_path):
    path = tmp_path / "trace.png"
    drawing = execution.draw(path)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    image = matplotlib.image.imread(path)
    assert image.shape[0] > 400 and image.shape[1] > 300
    rgb = (image[..., :3] * 255).round().astype(int)
    for fill in drawing.regions.values():  # box fills are solid: their colour is in the image
        want = torch.tensor([int(fill[i:i + 2], 16) for i in (1, 3, 5)])
        hits = (torch.from_numpy(rgb) == want).all(-1).sum()
        assert hits > 100, fill
    assert set(drawing.positions) == set(drawing.graph)


def test_svg_keeps_text(execution, tmp_path):
    path = tmp_path / "trace.svg"
    execution.draw(path, title="two regions")
    text = path.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    for word in ("two regions", "fuse_0", "fuse_1", "dist", "return"):
        assert word in text


def test_other_stages_and_formats(execution, tmp_path):
    acquisition = primtrace.trace(block)(torch.randn(4, 8), torch.randn(8), torch.randn(8))
    model = acquisition.draw(tmp_path / "acq.pdf")
    assert not model.regions and (tmp_path / "acq.pdf").read_bytes()[:4] == b"%PDF"
    with pytest.raises(ValueError, match=".png, .svg or .pdf"):
        execution.draw(tmp_path / "trace.jpg")


def test_importing_the_module_does_not_import_matplotlib():
    code = "import sys, primtrace.ir.draw; assert 'matplotlib' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def recurrent(x, y, n):
    a, b = torch.chunk(x, 2, dim=-1)  # one node, two outputs
    z = torch.ones(4, 4) * n
    outs = []
    for i in range(4):
        a = torch.tanh(a * y + b) + z.sum() * i
        outs.append(a.exp())
    return torch.stack(outs).sum(0), torch.where(a > 0, a, b), n  # n: an input returned


def test_larger_trace_outlines_only_regions_that_enclose_nothing_else(tmp_path):
    from primtrace.ir.draw import _hull, _inside
    jfn = primtrace.jit(recurrent, executors=[ElementwiseFusion()])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", primtrace.OpaqueOpWarning)
        jfn(torch.randn(4, 8), torch.randn(4, 4), 3.0)
    drawing = primtrace.last_trace(jfn).draw(tmp_path / "big.png")
    g, pos = drawing.graph, drawing.positions
    assert len(drawing.nodes_with(role="output")) == 3
    (returned,) = [n for n in drawing.nodes_with(role="output") if g.nodes[n]["label"].endswith("n")]
    assert [g.nodes[p]["role"] for p in g.predecessors(returned)] == ["input"]
    for name in drawing.outlined:
        members = drawing.nodes_with(region=name)
        hull = _hull([(pos[n][0] + sx * box_size(g.nodes[n]["label"])[0] / 2,
                       pos[n][1] + sy * box_size(g.nodes[n]["label"])[1] / 2)
                      for n in members for sx in (-1, 1) for sy in (-1, 1)])
        assert not any(_inside(hull, pos[n]) for n in g if g.nodes[n]["region"] != name)
    assert set(drawing.labelled) <= set(drawing.regions)


def test_small_trace_outlines_and_names_both_regions(execution, tmp_path):
    drawing = execution.draw(tmp_path / "small.svg")
    assert drawing.outlined == drawing.labelled == ["fuse_0", "fuse_1"]
