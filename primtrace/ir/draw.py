"""Pictures of traces: the dataflow graph as PNG, SVG or PDF, fusion regions coloured.

    trace.draw("trace.png")                      # Trace.draw calls draw(trace, path)
    model = drawing_model(trace)                 # what would be drawn, without matplotlib

Two steps, so what a picture says can be tested without reading pixels:
:func:`drawing_model` builds a networkx graph of boxes (inputs, operations, outputs) with
their labels, roles and colours; :func:`draw` lays it out in layers (inputs above their
first consumer, each operation one layer below its latest producer, edges that skip layers
routed through bend points) and renders it with matplotlib, which is imported only here
and only when drawing (``pip install primtrace[draw]``).

In an execution trace each fused node is expanded into its prims, filled with its
region's colour, with the region's outline and name around them; nodes run one by one
(the torch executor, or any operator executor) are grey, opaque torch calls with a dashed
border. Inputs have green borders, outputs red.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from primtrace import dtypes
from primtrace.ir.proxy import NumberProxy, TensorProxy
from primtrace.ir.kinds import SymbolKind
from primtrace.ir.tree import proxies_in

#: fills for fusion regions (light) and their borders/labels (strong), in order of use
REGION_FILLS = ("#aec7e8", "#ffbb78", "#98df8a", "#c5b0d5", "#f7b6d2", "#dbdb8d", "#9edae5",
                "#ff9896", "#c49c94")
REGION_EDGES = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#e377c2", "#bcbd22", "#17becf",
                "#d62728", "#8c564b")
GREY, GREY_EDGE = "#e0e0e0", "#7f7f7f"
INPUT_EDGE, OUTPUT_EDGE, IO_FILL = "#1b7a2f", "#b2182b", "#ffffff"
_MAX_LABEL = 26  # characters per label line


@dataclass
class Drawing:
    """What a picture of a trace shows.

    `graph` is a networkx.DiGraph; each node has ``role`` ("input", "op" or "output"),
    ``label``, ``color`` (fill), ``edgecolor``, ``kind`` (the symbol's kind, or the role),
    ``region`` (the fused node's name, or None). `regions` maps region name -> fill colour
    and `region_sizes` region name -> number of prims. Edges carry ``proxy`` (its name).
    """
    graph: object
    title: str
    regions: dict = field(default_factory=dict)
    region_sizes: dict = field(default_factory=dict)
    # filled by draw(): box centres (inches), regions given an outline / a name on the canvas
    positions: dict = field(default_factory=dict)
    outlined: list = field(default_factory=list)
    labelled: list = field(default_factory=list)

    def nodes_with(self, **attrs) -> list:
        return [n for n, d in self.graph.nodes(data=True)
                if all(d.get(k) == v for k, v in attrs.items())]


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_LABEL else text[:_MAX_LABEL - 1] + "~"


def _describe(p) -> str:
    if isinstance(p, TensorProxy):
        return f"{dtypes.short_name(p.dtype)}{list(p.shape)}"
    if isinstance(p, NumberProxy):
        return p.python_type.__name__
    return ""


def _op_label(node) -> str:
    outs = ", ".join(p.name for p in node.output_proxies) or "-"
    return f"{_clip(node.symbol.name)}\n{_clip(outs)}"


def drawing_model(trace, *, expand_fused: bool = True) -> Drawing:
    """The boxes and arrows of `trace`'s dataflow graph, with labels and colours.

    With `expand_fused`, a fused node becomes its prims (coloured by region); otherwise
    one box per fused node.
    """
    import networkx as nx
    g = nx.DiGraph()
    drawing = Drawing(g, f"{trace.name}: {trace.stage or 'trace'}" + (" trace" if trace.stage else ""))
    producer: dict[str, str] = {}
    for p in trace.inputs:
        gid = f"in:{p.name}"
        g.add_node(gid, role="input", kind="input", region=None, color=IO_FILL,
                   edgecolor=INPUT_EDGE, label=_clip(p.name) + "\n" + _clip(_describe(p)))
        producer[p.name] = gid

    def add_op(node, gid, region):
        if region is not None:
            k = list(drawing.regions).index(region) % len(REGION_FILLS)
            fill, edge = REGION_FILLS[k], REGION_EDGES[k]
        else:
            fill, edge = GREY, GREY_EDGE
        g.add_node(gid, role="op", kind=node.symbol.kind, region=region, color=fill,
                   edgecolor=edge, label=_op_label(node))
        for p in node.inputs:
            if p.name in producer and not g.has_edge(producer[p.name], gid):
                g.add_edge(producer[p.name], gid, proxy=p.name)
        for p in node.output_proxies:
            producer[p.name] = gid

    count = 0
    for node in trace.nodes:
        if node.symbol.kind is SymbolKind.FUSED:
            name = node.symbol.name
            drawing.regions[name] = REGION_FILLS[len(drawing.regions) % len(REGION_FILLS)]
            drawing.region_sizes[name] = len(node.subnodes)
            if expand_fused:
                for sub in node.subnodes:
                    add_op(sub, f"op{count}", name)
                    count += 1
                continue
            add_op(node, f"op{count}", name)
            g.nodes[f"op{count}"]["label"] = f"{_clip(name)}\n{len(node.subnodes)} prims"
        else:
            add_op(node, f"op{count}", None)
        count += 1
    seen = set()
    for p in proxies_in(trace.outputs):
        if p.name in seen:
            continue
        seen.add(p.name)
        gid = f"out:{p.name}"
        g.add_node(gid, role="output", kind="output", region=None, color=IO_FILL,
                   edgecolor=OUTPUT_EDGE, label="return\n" + _clip(p.name))
        if p.name in producer:
            g.add_edge(producer[p.name], gid, proxy=p.name)
    return drawing


# --- layout ------------------------------------------------------------------------------
_FONT = 8.0                                  # points
_CHAR_W, _LINE_H = 0.6 * _FONT / 72, 1.25 * _FONT / 72  # inches (monospace)
_BOX_PAD = 0.35                              # box padding, in font sizes (matplotlib's unit)
_PAD, _GAP_X, _GAP_Y = _BOX_PAD * _FONT / 72, 0.22, 0.42  # inches


def box_size(label: str) -> tuple[float, float]:
    """Width and height (inches) of a box holding `label` in the drawing's font."""
    lines = label.split("\n")
    return (max(len(s) for s in lines) * _CHAR_W + 2 * _PAD + 0.04,
            len(lines) * _LINE_H + 2 * _PAD)


def _layers(g) -> dict:
    import networkx as nx
    layer = {}
    order = list(nx.topological_sort(g))
    for n in order:
        if g.nodes[n]["role"] != "input":
            layer[n] = 1 + max((layer.get(p, 0) for p in g.predecessors(n)), default=0)
    for n in order:  # an input sits just above its first consumer
        if g.nodes[n]["role"] == "input":
            layer[n] = min((layer[s] for s in g.successors(n)), default=1) - 1
    return layer


def layout(drawing: Drawing) -> tuple[dict, dict]:
    """(positions, bends): box centres in inches (y grows upwards, inputs on top) and, per
    edge that skips layers, the points it bends at. Layered, barycentre ordering."""
    g = drawing.graph
    layer = _layers(g)
    # a chain of dummy points per edge that skips layers, so it gets a lane of its own
    size = {n: box_size(d["label"]) for n, d in g.nodes(data=True)}
    up: dict = {n: [] for n in g}
    chains = {}
    for u, v in g.edges:
        prev, chain = u, []
        for k in range(layer[u] + 1, layer[v]):
            d = ("bend", u, v, k)
            layer[d], size[d], up[d] = k, (0.12, 0.0), [prev]
            chain.append(d)
            prev = d
        up[v].append(prev)
        chains[(u, v)] = chain
    down: dict = {n: [] for n in layer}
    for n, preds in up.items():
        for p in preds:
            down[p].append(n)
    rows: dict[int, list] = {}
    for n in sorted(layer, key=lambda n: (layer[n], _index(n))):
        rows.setdefault(layer[n], []).append(n)
    keys = sorted(rows)
    pos = {n: i for r in rows.values() for i, n in enumerate(r)}
    for _ in range(4):  # barycentre sweeps, down then up; stable for ties
        for sweep, nbrs in ((keys[1:], up), (keys[-2::-1], down)):
            for k in sweep:
                rows[k].sort(key=lambda n: (sum(pos[m] for m in nbrs[n]) / len(nbrs[n])
                                            if nbrs[n] else pos[n]))
                pos.update((n, i) for i, n in enumerate(rows[k]))
    x = {}
    for k in keys:  # packed and centred, then pulled towards neighbours
        at = 0.0
        for n in rows[k]:
            x[n] = at + size[n][0] / 2
            at += size[n][0] + _GAP_X
        shift = (at - _GAP_X) / 2
        for n in rows[k]:
            x[n] -= shift
    for _ in range(6):
        for sweep, nbrs in ((keys, up), (keys[::-1], down)):
            for k in sweep:
                _place_row(rows[k], x, size, {n: sum(x[m] for m in nbrs[n]) / len(nbrs[n])
                                              for n in rows[k] if nbrs[n]})
    height = {k: max(size[n][1] for n in rows[k]) for k in keys}
    y, at = {}, 0.0
    for k in keys:
        at -= height[k] / 2
        for n in rows[k]:
            y[n] = at
        at -= height[k] / 2 + _GAP_Y
    positions = {n: (x[n], y[n]) for n in g}
    bends = {e: [(x[d], y[d]) for d in chain] for e, chain in chains.items()}
    return positions, bends


def _index(n) -> tuple:
    """Trace order of a graph node (inputs, then operations, then outputs)."""
    if isinstance(n, tuple):
        return (1, int(n[1][2:]) if n[1].startswith("op") else -1, n[3])
    kind, _, rest = n.partition(":") if ":" in n else ("op", "", n[2:])
    return ({"in": 0, "op": 1, "out": 2}[kind], int(rest) if kind == "op" else 0, 0)


def _place_row(row, x, size, want) -> None:
    """Move the boxes of one row towards `want` keeping their order and spacing."""
    target = [want.get(n, x[n]) for n in row]
    placed = []
    for i, n in enumerate(row):
        lo = placed[-1] + (size[row[i - 1]][0] + size[n][0]) / 2 + _GAP_X if placed else None
        placed.append(target[i] if lo is None else max(target[i], lo))
    # the forward pass only pushes right: shift back by the mean displacement
    shift = sum(p - t for p, t in zip(placed, target)) / len(row)
    for n, p in zip(row, placed):
        x[n] = p - shift


# --- rendering ----------------------------------------------------------------------------
def _hull(points):
    """Convex hull (counter-clockwise) of 2-D points: Andrew's monotone chain."""
    pts = sorted(set(points))
    if len(pts) <= 2:
        return pts

    def cross(o, a, b):
        return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])
    lower, upper = [], []
    for p in pts:
        while len(lower) >= 2 and cross(lower[-2], lower[-1], p) <= 0:
            lower.pop()
        lower.append(p)
    for p in reversed(pts):
        while len(upper) >= 2 and cross(upper[-2], upper[-1], p) <= 0:
            upper.pop()
        upper.append(p)
    return lower[:-1] + upper[:-1]


def _border(center, half, toward):
    """Where the segment from a box's centre towards `toward` crosses the box's border."""
    (cx, cy), (hw, hh) = center, half
    dx, dy = toward[0] - cx, toward[1] - cy
    t = min(hw / abs(dx) if dx else float("inf"), hh / abs(dy) if dy else float("inf"))
    return (cx + dx * t, cy + dy * t) if t < float("inf") else center


def _inside(hull, point) -> bool:
    """Whether `point` is strictly inside the counter-clockwise convex polygon `hull`."""
    return len(hull) >= 3 and all(
        (b[0] - a[0]) * (point[1] - a[1]) - (b[1] - a[1]) * (point[0] - a[0]) > 0
        for a, b in zip(hull, hull[1:] + hull[:1]))


def _corners(center, half, margin=0.0):
    (cx, cy), (hw, hh) = center, half
    return [(cx + sx * (hw + margin), cy + sy * (hh + margin)) for sx in (-1, 1) for sy in (-1, 1)]


def _outline_regions(ax, drawing, positions, half) -> None:
    """Shade each region's convex hull and name it above its top box, but only where that
    misleads no one: a hull that would take in another box, or a name that would cover
    another name or a box, is left out (colours and the legend still say it)."""
    from matplotlib.patches import Polygon
    g = drawing.graph
    taken = [(x - w, y - h, x + w, y + h) for n, ((x, y), (w, h)) in
             ((n, (positions[n], half[n])) for n in g)]
    for k, (name, fill) in enumerate(drawing.regions.items()):
        members = drawing.nodes_with(region=name)
        hull = _hull([c for n in members for c in _corners(positions[n], half[n], 0.07)])
        others = (c for n in g if g.nodes[n]["region"] != name
                  for c in [positions[n], *_corners(positions[n], half[n])])
        edge = REGION_EDGES[k % len(REGION_EDGES)]
        if not any(_inside(hull, c) for c in others):
            ax.add_patch(Polygon(hull, closed=True, fc=fill, ec=edge, alpha=0.35, lw=1.0,
                                 ls="--", zorder=0, joinstyle="round"))
            drawing.outlined.append(name)
        top = max(members, key=lambda n: (positions[n][1], -positions[n][0]))
        (cx, cy), (hw, hh) = positions[top], half[top]
        x0, y0 = cx - hw - 0.07, cy + hh + 0.07
        rect = (x0, y0, x0 + len(name) * 0.68 * (_FONT - 1) / 72, y0 + 1.3 * (_FONT - 1) / 72)
        if not any(rect[0] < r[2] and r[0] < rect[2] and rect[1] < r[3] and r[1] < rect[3]
                   for r in taken):
            ax.text(x0, y0 + 0.02, name, ha="left", va="bottom", fontsize=_FONT - 1,
                    color=edge, weight="bold", zorder=4)
            taken.append(rect)
            drawing.labelled.append(name)


def draw(trace, path, *, expand_fused: bool = True, title: str | None = None,
         dpi: int = 150) -> Drawing:
    """Write a picture of `trace`'s dataflow graph to `path` (.png, .svg or .pdf, by suffix).

    Returns the :class:`Drawing` (with the positions used). Needs matplotlib.
    """
    try:
        from matplotlib.figure import Figure
        from matplotlib.patches import FancyArrowPatch, Patch
        from matplotlib.path import Path as MplPath
    except ImportError as e:
        raise ImportError("drawing traces needs matplotlib: pip install 'primtrace[draw]'") from e
    path = Path(path)
    if path.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise ValueError(f"draw writes .png, .svg or .pdf files, not {path.name!r}")
    drawing = drawing_model(trace, expand_fused=expand_fused)
    g = drawing.graph
    positions, bends = layout(drawing)
    drawing.positions = positions
    margin, legend_w = 0.35, 2.4
    if positions:
        xs = [positions[n][0] + s * box_size(g.nodes[n]["label"])[0] / 2 for n in g for s in (-1, 1)]
        ys = [positions[n][1] + s * box_size(g.nodes[n]["label"])[1] / 2 for n in g for s in (-1, 1)]
        xs += [bx for points in bends.values() for bx, _ in points]
    else:
        xs, ys = [0.0, 1.0], [0.0, 1.0]
    x0, x1, y0, y1 = min(xs) - margin, max(xs) + margin, min(ys) - margin, max(ys) + margin + 0.35
    width, height = (x1 - x0) + legend_w, max(y1 - y0, 2.2)
    dpi = min(dpi, max(30, int(16000 / max(width, height))))  # keep huge traces within limits
    fig = Figure(figsize=(width, height), dpi=dpi)
    ax = fig.add_axes((0, 0, (x1 - x0) / width, 1))
    ax.set_xlim(x0, x1)
    ax.set_ylim(y1 - height, y1)  # 1 data unit = 1 inch, top-aligned
    ax.set_axis_off()
    ax.text(x0 + 0.1, y1 - 0.12, title or drawing.title, ha="left", va="top",
            fontsize=_FONT + 2, weight="bold")

    boxes, half = {}, {}
    for n, d in g.nodes(data=True):
        style = f"{'round' if d['role'] == 'op' else 'round4'},pad={_BOX_PAD}"
        boxes[n] = ax.text(*positions[n], d["label"], ha="center", va="center",
                           family="monospace", fontsize=_FONT, zorder=3,
                           bbox=dict(boxstyle=style, fc=d["color"], ec=d["edgecolor"],
                                     lw=1.6 if d["role"] != "op" else 1.0,
                                     ls="--" if d["kind"] == "opaque" else "-"))
    fig.draw_without_rendering()  # sizes the boxes: arrows stop at their real borders
    to_data = ax.transData.inverted()
    for n, text in boxes.items():
        (a, b), (c, e) = to_data.transform(text.get_bbox_patch().get_window_extent().get_points())
        half[n] = ((c - a) / 2, (e - b) / 2)

    if expand_fused:
        _outline_regions(ax, drawing, positions, half)
    for u, v in g.edges:
        points = [positions[u], *bends[(u, v)], positions[v]]
        points[0] = _border(positions[u], half[u], points[1])
        points[-1] = _border(positions[v], half[v], points[-2])
        ax.add_patch(FancyArrowPatch(path=MplPath(points), arrowstyle="-|>", mutation_scale=9,
                                     lw=0.8, color="#555555", zorder=2))

    handles = [Patch(fc=fill, ec=REGION_EDGES[i % len(REGION_EDGES)],
                     label=f"{name} ({drawing.region_sizes[name]} prims)")
               for i, (name, fill) in enumerate(drawing.regions.items())]
    kinds = {d["kind"] for _, d in g.nodes(data=True) if d["role"] == "op" and d["region"] is None}
    if kinds - {"opaque"}:
        handles.append(Patch(fc=GREY, ec=GREY_EDGE, label="run node by node"))
    if "opaque" in kinds:
        handles.append(Patch(fc=GREY, ec=GREY_EDGE, ls="--", label="opaque torch call"))
    handles += [Patch(fc=IO_FILL, ec=INPUT_EDGE, lw=1.6, label="input"),
                Patch(fc=IO_FILL, ec=OUTPUT_EDGE, lw=1.6, label="output")]
    fig.legend(handles=handles, loc="upper right", fontsize=_FONT, frameon=False,
               bbox_to_anchor=(1.0, 1.0 - 0.3 / height))
    path.parent.mkdir(parents=True, exist_ok=True)
    from matplotlib import rc_context
    with rc_context({"svg.fonttype": "none"}):  # SVG text stays text: searchable, smaller
        fig.savefig(path, format=path.suffix[1:].lower(), dpi=dpi, facecolor="white")
    return drawing
