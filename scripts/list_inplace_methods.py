#!/usr/bin/env python
"""List torch.Tensor's in-place methods (public names ending in ``_``) and, for each, whether
primtrace traces it into refs or records it as an opaque torch call.

The answer is the tracer's own (``primtrace.tracer.mapping.resolve``), so it follows the refs
as they are added. Opaque methods are grouped by why they have no ref yet; a method in none
of the groups below counts as elementwise, so a new elementwise method torch adds shows up
as missing rather than being filed away.

    python scripts/list_inplace_methods.py              # a Markdown table, then a summary
    python scripts/list_inplace_methods.py --opaque     # only the opaque methods
    python scripts/list_inplace_methods.py --check      # exit 1 if an elementwise one is opaque
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from primtrace.tracer import mapping  # noqa: E402

#: why an opaque method has no ref: the kinds of op that are not elementwise
NOT_ELEMENTWISE = {
    "random": ("bernoulli_", "cauchy_", "exponential_", "geometric_", "log_normal_", "normal_",
               "random_", "uniform_"),
    "indexing/scatter": ("fill_diagonal_", "index_add_", "index_copy_", "index_fill_",
                         "index_put_", "index_reduce_", "masked_scatter_", "put_", "scatter_",
                         "scatter_add_", "scatter_reduce_"),
    "reduction/scan": ("cumprod_", "cumsum_", "logcumsumexp_", "renorm_"),
    "linear algebra": ("addbmm_", "addmm_", "addmv_", "addr_", "baddbmm_"),
    "view/metadata": ("as_strided_", "detach_", "requires_grad_", "resize_", "resize_as_",
                      "resize_as_sparse_", "set_", "share_memory_", "sparse_resize_",
                      "sparse_resize_and_clear_", "squeeze_", "swapaxes_", "swapdims_", "t_",
                      "transpose_", "unsqueeze_"),
    "Python callback": ("apply_", "map2_", "map_"),
}
KIND = {name: kind for kind, names in NOT_ELEMENTWISE.items() for name in names}
ELEMENTWISE = "elementwise"


def inplace_methods() -> list[str]:
    return sorted(name for name in dir(torch.Tensor)
                  if name.endswith("_") and not name.startswith("_")
                  and callable(getattr(torch.Tensor, name, None)))


def classify() -> list[tuple[str, str | None, str]]:
    """(method, the ref it traces into or None if opaque, its kind) per in-place method."""
    rows = []
    for name in inplace_methods():
        target = mapping.resolve(getattr(torch.Tensor, name))
        ref = target.ref.qualname if target.ref is not None else None
        rows.append((name, ref, KIND.get(name, ELEMENTWISE)))
    return rows


def render(rows, opaque_only=False) -> str:
    lines = ["| method | traced as | kind |", "|---|---|---|"]
    for name, ref, kind in rows:
        if opaque_only and ref is not None:
            continue
        lines.append(f"| `{name}` | {f'`{ref}`' if ref else 'opaque torch call'} | {kind} |")
    traced = sum(ref is not None for _, ref, _ in rows)
    lines += ["", f"{len(rows)} in-place Tensor methods: {traced} traced into refs, "
              f"{len(rows) - traced} opaque."]
    opaque = {}
    for name, ref, kind in rows:
        if ref is None:
            opaque.setdefault(kind, []).append(name)
    for kind in [ELEMENTWISE, *NOT_ELEMENTWISE]:
        if kind in opaque:
            lines.append(f"- opaque, {kind} ({len(opaque[kind])}): {', '.join(opaque[kind])}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--opaque", action="store_true", help="list only the opaque methods")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if an elementwise method is opaque")
    options = parser.parse_args(argv)
    rows = classify()
    sys.stdout.write(render(rows, options.opaque))
    missing = [name for name, ref, kind in rows if ref is None and kind == ELEMENTWISE]
    return 1 if options.check and missing else 0


if __name__ == "__main__":
    sys.exit(main())
