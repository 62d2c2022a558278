"""The benchmark scripts still run (tiny sizes, one round; their numbers are not checked)."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script, args", [
    ("sweep.py", ["--no-compile", "--fuse-all", "--sizes", "10", "--dtypes", "f32,bf16",
                  "--cases", "a + b;gelu(a + b)", "--rounds", "1", "--time", "0.001"]),
    ("single_ops.py", ["--ops", "neg,add,fmod", "--sizes", "10", "--dtypes", "f16",
                       "--rounds", "1", "--time", "0.001"]),
])
def test_benchmark_script_runs(script, args):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "worst jit/eager" in done.stdout


def test_gpt_block_benchmark_runs():
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpt_block.py"), "--no-compile",
                           "--batch", "1", "--context", "8", "--width", "16", "--heads", "2",
                           "--rounds", "1", "--time", "0.001"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| primtrace.jit |" in done.stdout


def test_reductions_benchmark_runs():
    args = ["--no-compile", "--scale", "0.002", "--rounds", "1", "--time", "0.001"]
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "reductions.py"), *args],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| W6 |" in done.stdout and "| W9 |" in done.stdout and "the roofline" in done.stdout


def test_training_benchmark_runs():
    args = ["--no-compile", "--scale", "0.002", "--rounds", "1", "--time", "0.001",
            "--only", "W13"]
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "training.py"), *args],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| W13 " in done.stdout and "saved MiB" in done.stdout


def test_saved_bytes_benchmark_runs():
    args = ["--no-compile", "--scale", "0.002"]
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "saved_bytes.py"), *args],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| W13 " in done.stdout and "| W17 " in done.stdout and "min_cut" in done.stdout


def test_masked_loss_benchmark_runs():
    args = ["--no-compile", "--scale", "0.002", "--rounds", "1", "--time", "0.001",
            "--fractions", "0.5,0.1"]
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "masked_loss.py"), *args],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| 50% |" in done.stdout and "compiles for 2 masks of different counts: 1" in done.stdout


def test_variable_batch_benchmark_runs():
    args = ["--no-compile", "--context", "8", "--width", "16", "--heads", "2", "--calls", "12",
            "--max-batch", "6", "--rounds", "1"]
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "variable_batch.py"), *args],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| primtrace.jit | 2 |" in done.stdout


def test_decoding_benchmark_runs():
    """W18 on 6 tokens: tokens equal eager's (the script exits otherwise), two traces."""
    args = ["--no-compile", "--tokens", "6", "--batches", "2", "--rounds", "1"]
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "decoding.py"), *args],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| primtrace.jit | 2 |" in done.stdout, done.stdout


def test_models_benchmark_runs():
    """Two tiny library models (transformers' DistilBERT; torchvision's MobileNet is skipped
    with a note where torchvision is absent, as in CI), jit only, one short round."""
    args = ["--quick", "--no-compile", "--rounds", "1", "--time", "0.01"]
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "models.py"), *args],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| distilbert |" in done.stdout and "worst jit/eager" in done.stdout
    assert "MISMATCH" not in done.stdout and "error:" not in done.stdout
