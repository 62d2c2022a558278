#!/usr/bin/env python
"""Draw docs/trace.png: the execution trace of a small block with two fusion regions.

A GELU-style activation (seven prims) and a gated residual (three prims) fuse into one
Numba kernel each; group_norm, which has no ref, runs between them as torch's own call
(layer_norm would fuse with both: one row kernel). The picture
is what ``Trace.draw`` makes (needs matplotlib: ``pip install primtrace[draw]``).

    python scripts/draw_example.py                   (or: --output docs/trace.svg)
"""
from __future__ import annotations

import argparse
import pathlib
import warnings

import torch

import primtrace
from primtrace.executors import FusionExecutor, default_executors


def block(x, weight, bias):
    h = torch.nn.functional.gelu(x * 2 + 1)
    y = torch.nn.functional.group_norm(h, 2, weight, bias)
    return torch.sigmoid(y) * y + x


def executors():
    """The default executors if they fuse; else the Numba fusion executor explicitly."""
    chosen = default_executors()
    if any(isinstance(e, FusionExecutor) for e in chosen):
        return chosen
    from primtrace.executors.numba import NumbaFusionExecutor
    return [NumbaFusionExecutor()]


def main(argv=None) -> pathlib.Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = pathlib.Path(__file__).resolve().parent.parent
    parser.add_argument("--output", type=pathlib.Path, default=root / "docs" / "trace.png")
    args = parser.parse_args(argv)
    jfn = primtrace.jit(block, executors=executors())
    x, weight, bias = torch.randn(4, 8), torch.randn(8), torch.randn(8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", primtrace.OpaqueOpWarning)
        jfn(x, weight, bias)
    execution = primtrace.last_trace(jfn)
    drawing = execution.draw(args.output, title="block(x, weight, bias): execution trace")
    print(f"wrote {args.output}: {len(drawing.regions)} fusion regions, "
          f"{drawing.graph.number_of_nodes()} boxes")
    return args.output


if __name__ == "__main__":
    main()
