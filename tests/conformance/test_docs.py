"""docs/refs.md is generated: it must be what scripts/list_refs.py prints now."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_refs_page_is_current():
    spec = importlib.util.spec_from_file_location("list_refs", ROOT / "scripts" / "list_refs.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    page = (ROOT / "docs" / "refs.md").read_text()
    assert page == script.render(), ("docs/refs.md is stale: regenerate it with "
                                     "`.venv/bin/python scripts/list_refs.py -o docs/refs.md`")


def test_ref_coverage_page_is_current():
    spec = importlib.util.spec_from_file_location("ref_coverage", ROOT / "scripts" / "ref_coverage.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    page = (ROOT / "docs" / "ref-coverage.md").read_text()
    assert page == script.render(), ("docs/ref-coverage.md is stale: regenerate it with "
                                     "`.venv/bin/python scripts/ref_coverage.py -o docs/ref-coverage.md`")
