"""Every example runs as a script and prints what it promises (quickstart at a smaller size)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_example(name, *args):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / name), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_quickstart():
    out = run_example("quickstart.py", "--size", "65536")
    for stage in ("acquisition", "prims", "optimized", "execution"):
        assert f"# {stage} trace\ndef add(a: \"cpu f16[4, 5]\", b: \"cpu f32[4, 5]\")" in out
    assert "t0 = prims.convert_element_type(a, torch.float32)" in out
    assert "t1 = numba_fusion_0(a, b)" in out
    assert "t17 = numba_fusion_0(a, b, c)" in out          # the 11-op chain: one region
    assert "def kernel_serial" in out and "m.sin_" in out  # vectorizable sin, not libm
    assert "x eager)" in out


def test_custom_executor():
    out = run_example("custom_executor.py")
    assert 't0 = prims.exp(a)  # t0: "cpu f32[1000]" (by numpy_exp)' in out
    assert "numpy_fusion_0(" in out and "# t1 = prims.mul(t0, b)" in out
    f64 = out.split("def f(a: \"cpu f64[1000]\"")[1]
    assert "(by numpy_exp)" not in f64                      # the checker refused float64
    assert "matches eager: True" in out


def test_inspect_traces():
    out = run_example("inspect_traces.py")
    assert "torch.Tensor.logcumsumexp" in out and "have no ref" in out
    assert "cache: 1 hits, 3 misses" in out
    assert "recompiled: tensor 'x' dtype mismatch: expected float16, actual float32" in out
    assert "recompiled: number 'scale' type mismatch: expected float, actual int" in out
    assert "# execution trace" in out


def test_fused_adamw():
    out = run_example("fused_adamw.py")                     # its defaults: 200 steps, width 128
    line = next(l for l in out.splitlines() if "one update step vs torch.optim.AdamW" in l)
    assert float(line.rsplit(":", 1)[1]) < 1e-6            # every step matches, to rounding
    assert "after 200 steps" in out                         # both trainings converged (asserted)
    regions = next(l for l in out.splitlines() if l.startswith("fused regions"))
    count = int(regions.split(":")[1].split(";")[0])
    assert 1 <= count <= 6 + 1 and "compiles: 1," in regions  # about a region per parameter shape
    assert "speedup vs eager" in out


@pytest.mark.parametrize("script", ["draw_example.py", "list_refs.py"])
def test_scripts_run(script, tmp_path):
    args = (["-o", str(tmp_path / "refs.md")] if script == "list_refs.py"
            else ["--output", str(tmp_path / "trace.png")])
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / script), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    written = next(tmp_path.iterdir())
    assert written.stat().st_size > 1000


def test_gpt():
    out = run_example("gpt.py", "--layers", "1", "--width", "32", "--heads", "2",
                      "--context", "16", "--batch", "2", "--no-compile")
    for name in ("primtrace.jit", 'torch.compile(backend="primtrace")'):
        line = next(l for l in out.splitlines() if l.startswith(name + ":"))
        logits, grads = line.split("max |logits - eager| ")[1], line.split("max |grad - eager| ")[1]
        assert float(logits.split(",")[0]) < 1e-5 and float(grads) < 1e-5, line
    assert "one block's execution trace" in out and "x eager)" in out


def test_train_gpt():
    out = run_example("train_gpt.py", "--steps", "5", "--log-every", "2", "--layers", "1",
                      "--width", "32", "--heads", "2", "--context", "16", "--batch", "4",
                      "--no-compile", "--timing-rounds", "1", "--timing-steps", "1",
                      "--threads", "1")
    lines = out.splitlines()
    header = next(i for i, l in enumerate(lines)
                  if l.split()[:3] == ["step", "eager", "primtrace.jit"])
    rows = [l.split() for l in lines[header + 1:header + 4]]
    assert [int(r[0]) for r in rows] == [0, 2, 4], out       # every 2 steps and the last
    eager, jitted = [float(r[1]) for r in rows], [float(r[2]) for r in rows]
    for e, j in zip(eager, jitted):
        assert abs(j - e) <= 1e-5 * abs(e), out               # the same training, to rounding
    assert eager[-1] < eager[0] and jitted[-1] < jitted[0]  # and it learns
    worst = float(out.split("difference to eager: primtrace.jit ")[1].split(",")[0])
    assert worst < 1e-5, out
    assert "primtrace.jit fallback: none (fused forward" in out, out
    assert "primtrace.jit:" in out and "x eager)" in out


def test_training_traces_section_is_the_scripts():
    """docs/traces.md's training section is what scripts/print_training_traces.py writes (its
    outputs are pinned by tests/tracer/test_golden_traces.py, which runs every doc example)."""
    import importlib.util
    import re
    spec = importlib.util.spec_from_file_location("print_training_traces",
                                                  ROOT / "scripts" / "print_training_traces.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    doc = (ROOT / "docs" / "traces.md").read_text()
    inside = doc.split(script.BEGIN, 1)[1].split(script.END, 1)[0]
    written = script.BEGIN + inside + script.END + "\n"
    outputs = re.findall(r"```text\n(.*?)```", written, re.S)
    assert len(outputs) == len(script.EXAMPLES) >= 2
    assert written == script.section(outputs)
    assert "# note: the first" in outputs[0] and "return ((" in outputs[0]   # recomputed; saved
