"""The generated pages in docs/ must be what their scripts print now."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("script, page", [("list_refs.py", "refs.md"),
                                          ("ref_coverage.py", "ref-coverage.md")])
def test_generated_page_is_current(script, page):
    spec = importlib.util.spec_from_file_location(script[:-3], ROOT / "scripts" / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (ROOT / "docs" / page).read_text() == module.render(), (
        f"docs/{page} is stale: regenerate it with "
        f"`.venv/bin/python scripts/{script} -o docs/{page}`")
