"""Every code snippet in README.md runs as written, and prints what the README shows.

The README's fenced blocks, by info string:

- ``python``: code. The blocks of a section (``## ...``) run in order in one namespace, as
  a reader who pastes the tour into one session would; each section starts afresh, as a
  reader who copies only the Executors snippet would (so it must have its own imports);
- ``text``: exactly what the python block before it printed (trailing spaces aside);
- ``python output``: printed code shown with highlighting: an excerpt, whose lines must
  appear consecutively in what the python block before it printed;
- ``bash``: the two set-up commands at the top (checked to name what exists; CI runs the
  second verbatim, ``.ci/run``); blocks with no language are diagrams.
"""
import contextlib
import inspect
import io
import re
import warnings
from pathlib import Path

import pytest

import primtrace

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.M | re.S)


def blocks():
    """(line number, section heading, info string, body) of every fenced block, in order."""
    text = README.read_text()
    found = []
    for m in FENCE.finditer(text):
        headings = re.findall(r"^## .*$", text[:m.start()], re.M)
        found.append((text.count("\n", 0, m.start()) + 1, headings[-1] if headings else "",
                      m.group(1).strip(), m.group(2)))
    return found


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def _contains(haystack: list[str], needle: list[str]) -> bool:
    return any(haystack[i:i + len(needle)] == needle for i in range(len(haystack) - len(needle) + 1))


def test_every_python_snippet_runs_and_prints_what_the_readme_shows(tmp_path):
    section, printed = None, None    # printed: what the last python block printed
    ran = checked = 0
    for line, heading, info, body in blocks():
        words = info.split()
        where = f"README.md:{line}"
        if heading != section:
            section, namespace, printed = heading, {"__name__": "__readme__"}, None
        if words == ["python"]:
            path = tmp_path / f"readme_line_{line}.py"      # a real file: traces quote its lines
            path.write_text(body)
            out = io.StringIO()
            with contextlib.redirect_stdout(out), warnings.catch_warnings():
                warnings.simplefilter("ignore", primtrace.OpaqueOpWarning)
                try:
                    exec(compile(body, str(path), "exec"), namespace)
                except Exception as e:
                    pytest.fail(f"{where}: the snippet raises {type(e).__name__}: {e}")
            printed, ran = out.getvalue(), ran + 1
        elif words in (["text"], ["python", "output"]):
            assert printed is not None, f"{where}: output block with no python block before it"
            shown, actual = _lines(body), _lines(printed)
            if words == ["text"]:
                assert shown == actual, (f"{where}: the README shows\n" + "\n".join(shown)
                                         + "\n\nbut the snippet printed\n" + "\n".join(actual))
            else:
                assert shown and _contains(actual, shown), (
                    f"{where}: the README's excerpt is not in what the snippet printed:\n"
                    + "\n".join(actual))
            checked += 1
        else:
            assert words in ([], ["bash"]), f"{where}: unknown block kind {info!r}"
    assert ran >= 6 and checked >= 5, (ran, checked)


def test_the_setup_commands_name_what_exists():
    (first, *_) = [body for _, _, info, body in blocks() if info == "bash"]
    commands = _lines(first)
    assert commands == [
        "bash scripts/setup.sh && .venv/bin/python examples/quickstart.py",
        "bash scripts/setup.sh && .venv/bin/python -m pytest -q -p no:cacheprovider -n 2 tests",
    ]
    assert (ROOT / "scripts" / "setup.sh").is_file() and (ROOT / "examples" / "quickstart.py").is_file()
    assert commands[1] in (ROOT / ".ci" / "run").read_text()   # what CI runs, verbatim


def test_the_refs_style_snippet_is_the_real_source_of_refs_add():
    snippet = next(body for *_, info, body in blocks() if info == "python" and "@elementwise" in body)
    source = inspect.getsource(primtrace.refs.add.body)
    assert _lines(source) == _lines(snippet[snippet.index("@elementwise"):].split("\n\n")[0])
