#!/usr/bin/env python
"""Print docs/refs.md: every public ref, its torch counterpart, promotion kind and prims.

The refs are discovered, not listed: every public ref-level Symbol of ``primtrace.refs``,
``primtrace.refs.special`` and ``primtrace.refs.nn.functional``. The prims a ref uses are
found by tracing it on float32 proxies (one per tensor argument; float64, int64, bool or complex64
where the ref refuses float32); the few refs whose arguments no generic guess fits (a bool
mask, a size) are traced on the arguments of ``EXAMPLES``; where no call traces, the entry
says n/a. tests/conformance/test_docs.py checks that docs/refs.md is this script's output.

    python scripts/list_refs.py > docs/refs.md      (or: --output docs/refs.md)
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import itertools
import sys
import warnings
from typing import NamedTuple

import torch

from primtrace.ir import Symbol, TensorSpec, Trace, tracing
from primtrace.ir.strides import contiguous_strides
from primtrace.ir.tree import proxies_in
from primtrace.executors.numba import NumbaFusionExecutor

#: what the kernels can compute; the cost model may still leave a call to torch
FUSION = NumbaFusionExecutor(cost_model=False)

MODULES = (  # (ref module, its torch namespaces, most specific first)
    ("primtrace.refs", ("torch", "torch.Tensor", "torch.nn.functional")),
    ("primtrace.refs.special", ("torch.special",)),
    ("primtrace.refs.nn.functional", ("torch.nn.functional",)),
    ("primtrace.refs.linalg", ("torch.linalg",)),
)
#: Values tried for a required parameter that is not a tensor (threshold's value, n, ...).
NUMBER_GUESSES = (1, 0.5)
#: Proxy dtypes, in order: float32 first; the others for refs that refuse it.
DTYPES = (torch.float32, torch.float64, torch.int64, torch.bool, torch.complex64)


class T(NamedTuple):
    """A proxy argument of `shape` (dtype None: the dtype being tried)."""
    shape: tuple
    dtype: torch.dtype | None = None


#: Positional arguments for the refs no generic guess fits (a bool mask, one weight per
#: channel, a size): numbers and literals as given, T(...) for proxies.
EXAMPLES = {
    "masked_fill": [T((2, 3)), T((2, 3), torch.bool), 0.5],
    "masked_fill_": [T((2, 3)), T((2, 3), torch.bool), 0.5],
    "prelu": [T((2, 3)), T((3,))],
    "full": [(2, 3), 0.5], "zeros": [(2, 3)], "ones": [(2, 3)], "empty": [(2, 3)],
    "new_full": [T((2, 3)), (2, 3), 0.5], "new_zeros": [T((2, 3)), (2, 3)],
    "new_ones": [T((2, 3)), (2, 3)], "new_empty": [T((2, 3)), (2, 3)],
    "scalar_tensor": [0.5], "arange": [5],
    "softmax": [T((2, 3)), 1], "log_softmax": [T((2, 3)), 1], "softmin": [T((2, 3)), 1],
    "layer_norm": [T((2, 3)), (3,), T((3,)), T((3,))], "rms_norm": [T((2, 3)), (3,), T((3,))],
    "linspace": [0.0, 1.0, 5], "logspace": [0.0, 2.0, 5], "eye": [3], "tril_indices": [3, 3],
    "triu_indices": [3, 3], "empty_strided": [(2, 3), (1, 2)],
    "new_empty_strided": [T((2, 3)), (2, 3), (1, 2)], "view_as_complex": [T((3, 2))],
    # views and joins: a shape, a list of tensors
    **{name: [T((2, 3)), (3, 2)] for name in ("reshape", "view", "view_copy")},
    **{name: [T((2, 3)), (1, 0)] for name in ("permute", "permute_copy")},
    **{name: [T((1, 3)), (2, 3)] for name in ("expand", "expand_copy", "broadcast_to")},
    **{name: [[T((2, 3)), T((2, 3))]] for name in (
        "cat", "concat", "concatenate", "stack", "hstack", "vstack", "row_stack", "dstack",
        "column_stack")},
    **{name: [T((3, 2)), (1, 2)] for name in ("split_with_sizes", "split_with_sizes_copy")},
    "repeat": [T((2, 3)), 2, 1], "sum_to_size": [T((2, 3)), 1, 3], "unflatten": [T((2, 6)), 1, (2, 3)],
    "meshgrid": [T((2,)), T((3,))], "constant_pad_nd": [T((2, 3)), (1, 1)], "pad": [T((2, 3)), (1, 1)],
    "dsplit": [T((2, 2, 4)), 2], "slice_scatter": [T((2, 3)), T((1, 3)), 0, 1],
    "select_scatter": [T((2, 3)), T((3,)), 0, 0], "diagonal_scatter": [T((2, 3)), T((2,))],
    "as_strided_scatter": [T((2, 3)), T((2,)), (2,), (1,)],
    "pixel_shuffle": [T((1, 4, 2, 2)), 2], "pixel_unshuffle": [T((1, 1, 4, 4)), 2],
    "channel_shuffle": [T((1, 4, 2, 2)), 2],
    # convolution and pooling: (batch, channels, spatial...) inputs and weights
    **{f"conv{n}d": [T((1, 2) + (4,) * n), T((3, 2) + (2,) * n)] for n in (1, 2, 3)},
    **{f"conv_transpose{n}d": [T((1, 2) + (4,) * n), T((2, 3) + (2,) * n)] for n in (1, 2, 3)},
    **{f"{pool}{n}d": [T((1, 2) + (4,) * n), 2] for n in (1, 2, 3)
       for pool in ("max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool")},
    # products, indexing, random: operands of matching shapes, int64 indices
    **dict.fromkeys(("matmul", "mm", "dsmm"), [T((2, 3)), T((3, 4))]),
    "bmm": [T((2, 2, 3)), T((2, 3, 4))], "mv": [T((2, 3)), T((3,))],
    **dict.fromkeys(("dot", "vdot"), [T((3,)), T((3,))]),
    **dict.fromkeys(("outer", "ger"), [T((2,)), T((3,))]),
    "addmm": [T((2, 4)), T((2, 3)), T((3, 4))], "addmv": [T((2,)), T((2, 3)), T((3,))],
    "addr": [T((2, 3)), T((2,)), T((3,))], "baddbmm": [T((2, 2, 4)), T((2, 2, 3)), T((2, 3, 4))],
    "addbmm": [T((2, 4)), T((2, 2, 3)), T((2, 3, 4))],
    "batch_norm": [T((2, 3)), T((3,)), T((3,)), T((3,)), T((3,)), False, 0.1, 1e-5],
    "bernoulli": [T((2, 3)), 0.5], "rand": [2, 3], "randn": [2, 3], "geometric_": [T((2, 3)), 0.5],
    "renorm_": [T((2, 3)), 2, 0, 1.0], "bucketize": [T((2, 3)), T((4,))], "glu": [T((2, 4))],
    "nll_loss": [T((2, 3)), T((2,), torch.int64)],
    "index_select": [T((2, 3)), 0, T((2,), torch.int64)],
    "gather": [T((2, 3)), 1, T((2, 2), torch.int64)],
    "take_along_dim": [T((2, 3)), T((2, 1), torch.int64), 1],
    **dict.fromkeys(("scatter", "scatter_", "scatter_add", "scatter_add_"),
                    [T((2, 3)), 1, T((2, 2), torch.int64), T((2, 2))]),
    **dict.fromkeys(("scatter_reduce", "scatter_reduce_"),
                    [T((2, 3)), 1, T((2, 2), torch.int64), T((2, 2)), "sum"]),
    **dict.fromkeys(("index_add", "index_add_", "index_copy", "index_copy_"),
                    [T((2, 3)), 0, T((2,), torch.int64), T((2, 3))]),
    **dict.fromkeys(("index_fill", "index_fill_"), [T((2, 3)), 0, T((2,), torch.int64), 0.5]),
    "native_layer_norm": [T((2, 3)), (3,), T((3,)), T((3,)), 1e-5],
    "native_group_norm": [T((2, 4, 3)), T((4,)), T((4,)), 2, 4, 3, 2, 1e-5],
    # (L, N, E) query, key, value; embed_dim, heads, in_proj weight and bias, bias_k, bias_v,
    # add_zero_attn, dropout_p, out_proj weight and bias
    # a signal, n_fft, hop, win_length, window, center, pad_mode, normalized, onesided,
    # return_complex; a (freq, frames) spectrum, n_fft
    "stft": [T((16,)), 8, None, None, None, True, "reflect", False, None, True],
    "istft": [T((5, 3), torch.complex64), 8],
    "multi_head_attention_forward": [T((3, 2, 4)), T((5, 2, 4)), T((5, 2, 4)), 4, 2, T((12, 4)),
                                     T((12,)), None, None, False, 0.0, T((4, 4)), T((4,))],
}


def public_refs(module):
    """(name, symbol) for each public ref of `module`, sorted by name."""
    names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
    found = []
    for name in sorted(set(names)):
        obj = getattr(module, name, None)
        if isinstance(obj, Symbol) and obj.kind == "ref":
            found.append((name, obj))
    return found


def torch_counterpart(name, namespaces):
    for namespace in namespaces:
        target = _resolve(namespace)
        if target is not None and callable(getattr(target, name, None)):  # not torch.float (a dtype)
            return f"{namespace}.{name}"
    return None


def _resolve(dotted):
    head, *rest = dotted.split(".")
    obj = importlib.import_module(head)
    for part in rest:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _calls(sym, name):
    """Argument lists to try: the example if there is one; else tensors where the ref
    promotes (or for every required parameter), then numbers for the required parameters
    that are not tensors."""
    if name in EXAMPLES:
        yield [(None, False, value) for value in EXAMPLES[name]]
        return
    try:
        signature = inspect.signature(sym)
    except (TypeError, ValueError):
        return
    params = [p for p in signature.parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    # `op_(self, *args)` wrappers: their operands are in *args
    extra = (0, 1, 2) if any(p.kind is p.VAR_POSITIONAL for p in signature.parameters.values()) else (0,)
    required = [p for p in params if p.default is p.empty]
    promoted = set(getattr(sym, "promote", ()) or ())
    tensor_sets = []
    if promoted:
        tensor_sets.append({p.name for p in params if p.name in promoted})
    tensor_sets.append({p.name for p in required})
    if required:
        tensor_sets.append({required[0].name})
    seen = set()
    for tensors in tensor_sets:
        others = [p for p in required if p.name not in tensors]
        for guesses in itertools.product(NUMBER_GUESSES, repeat=len(others)):
            key = (frozenset(tensors), guesses)
            if key in seen:
                continue
            seen.add(key)
            numbers = dict(zip((p.name for p in others), guesses))
            call = [(p.name, p.kind is p.KEYWORD_ONLY, "tensor" if p.name in tensors
                     else numbers[p.name]) for p in params if p.name in tensors or p.name in numbers]
            for n in extra:
                yield call + [(None, False, "tensor")] * n


def prims_of(sym, name):
    """(leaf names the ref records on proxies, the leaves the Numba executor cannot fuse,
    the proxies' dtype), or (None, None, None)."""
    for dtype in DTYPES:
        for call in _calls(sym, name):
            used = _trace(sym, call, dtype)
            if used is not None:
                return (*used, dtype)
    return None, None, None


def _trace(sym, call, dtype):
    """The leaf names `sym` records for one call on `dtype` proxies, or None if it raises."""
    trace = Trace(sym.name)
    args, kwargs = [], {}
    def proxy(value):
        if isinstance(value, str) and value == "tensor":
            value = T((2, 3))
        if isinstance(value, T):
            shape = value.shape
            return trace.tensor(TensorSpec(shape, value.dtype or dtype, torch.device("cpu"),
                                           contiguous_strides(shape)))
        if isinstance(value, list):   # a list of tensors (cat's)
            return [proxy(v) for v in value]
        return value
    for name, keyword, value in call:
        value = proxy(value)
        if keyword:
            kwargs[name] = value
        else:
            args.append(value)
    trace.record_constants = not proxies_in((args, kwargs))  # a factory: record its prims
    try:
        with warnings.catch_warnings(), tracing(trace):
            warnings.simplefilter("ignore")
            sym(*args, **kwargs)
    except Exception:  # this generic call does not fit the ref; the caller tries the next
        return None
    names, unfused = [], []
    for node in trace.flat_nodes():
        label = node.symbol.name if node.symbol.module == "prims" else node.symbol.qualname
        if label not in names:
            names.append(label)
        runs_in_python = {"guard", "number"} & node.symbol.tags
        if not runs_in_python and not FUSION.can_fuse(node) and label not in unfused:
            unfused.append(label)
    return names, unfused


def _cell(text):
    return text.replace("|", "\\|")


def render() -> str:
    lines = ["# primtrace refs", "",
             "Generated by `scripts/list_refs.py` (do not edit by hand): every public ref, the torch",
             "function it mirrors, its type promotion kind where it carries one, and the prims it",
             "records when traced with float32 tensors (another dtype, named, where the ref refuses",
             "float32; n/a where no generic call traces), and whether the Numba fusion executor",
             "can compile all of them into its kernels on the CPU (else the prims the torch executor",
             "runs are named); its cost model still leaves some single calls and slow prims to",
             "torch (docs/fusion.md). A ref whose eager gradient differs from its prims' records",
             "`differentiate_as`: it and the masks and carriers only it reads are for the backward,",
             "and the optimize pass drops them from forward-only traces (docs/autodiff.md).", ""]
    total = 0
    for module_name, namespaces in MODULES:
        module = importlib.import_module(module_name)
        entries = public_refs(module)
        total += len(entries)
        lines += [f"## `{module_name}` ({len(entries)})", "",
                  "| ref | torch | promotion | prims | fused by Numba |", "|---|---|---|---|---|"]
        for name, sym in entries:
            label = f"`{name}`" + (f" (alias of `{sym.name}`)" if sym.name != name else "")
            counterpart = torch_counterpart(name, namespaces)
            kind = getattr(sym, "type_promotion_kind", None)
            used, unfused, dtype = prims_of(sym, name)
            if used is None:
                prims_cell = fused_cell = "n/a"
            else:
                fused_cell = ("yes" if not unfused else
                              "no" if len(unfused) == len(used) else "all but " + ", ".join(unfused))
                prims_cell = ", ".join(used) or "(none)"
                if dtype is not torch.float32:
                    prims_cell += f" (on {str(dtype).replace('torch.', '')})"
            lines.append("| " + " | ".join(_cell(c) for c in (
                label,
                f"`{counterpart}`" if counterpart else "—",
                getattr(kind, "name", str(kind)) if kind is not None else "—",
                prims_cell,
                fused_cell,
            )) + " |")
        lines.append("")
    lines += [f"**Total: {total} refs**", ""]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", "-o", help="write the page here instead of stdout")
    options = parser.parse_args(argv)
    page = render()
    if options.output:
        with open(options.output, "w") as f:
            f.write(page)
    else:
        sys.stdout.write(page)


if __name__ == "__main__":
    main()
