"""Golden texts: every example in docs/traces.md runs and prints exactly what the doc shows.

Each ```python block followed by a ```text block is one example. To refresh the texts after
an intended change of the printer or the refs, run
``PRIMTRACE_UPDATE_GOLDENS=1 .venv/bin/python -m pytest tests/tracer/test_golden_traces.py``
and review the diff of docs/traces.md.
"""
import contextlib
import io
import linecache
import os
import re
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import primtrace

DOC = Path(__file__).resolve().parents[2] / "docs" / "traces.md"
BLOCK = re.compile(r"```python\n(.*?)```\s*\n```text\n(.*?)```", re.S)


def examples():
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(DOC.read_text())]


def run_example(code: str, index: int) -> str:
    filename = f"docs/traces.md:example{index}"  # lets the printer show the example's lines
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    out = io.StringIO()
    namespace = {"torch": torch, "F": F, "primtrace": primtrace, "__name__": "example"}
    with contextlib.redirect_stdout(out), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        exec(compile(code, filename, "exec"), namespace)  # noqa: S102 - our own doc
    return out.getvalue()


def test_the_doc_has_the_documented_examples():
    texts = [text for _, text in examples()]
    assert len(texts) >= 6
    joined = "\n".join(texts)
    assert "t0 = prims.convert_element_type(a, torch.float32)" in joined
    assert "prims.copy_to" in joined and "torch.logcumsumexp" in joined


@pytest.mark.parametrize("index", range(len(examples())))
def test_example_prints_its_golden_text(index):
    code, expected = examples()[index]
    got = run_example(code, index)
    if os.environ.get("PRIMTRACE_UPDATE_GOLDENS") and got != expected:
        doc = DOC.read_text()
        DOC.write_text(doc.replace(f"```python\n{code}```\n\n```text\n{expected}```",
                                   f"```python\n{code}```\n\n```text\n{got}```", 1))
        return
    assert got == expected
