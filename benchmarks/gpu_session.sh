#!/bin/bash
# One device call on a lent GPU (see README "On a GPU"): versions, the CUDA tests on the
# device, then benchmarks/cuda_check.py. Logs go to $OUT (the device tool's output folder).
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD PRIMTRACE_GPU_SECONDS=${PRIMTRACE_GPU_SECONDS:-25}
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
if [ -d .whl ]; then   # wheels carried for the device's image (README "On a GPU")
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PYTHONPATH
fi
nvidia-smi -L
python3 - <<'PY'
import sys, importlib.metadata as md
import torch, numba, numpy
print(sys.version.split()[0], "torch", torch.__version__, "numba", numba.__version__,
      "numba-cuda", md.version("numba-cuda"), "numpy", numpy.__version__, torch.cuda.get_device_name(0))
from numba import cuda
print("numba sees", cuda.get_current_device().name, cuda.get_current_device().compute_capability)
PY
[ "${PYTEST_SECONDS:-240}" = 0 ] || timeout ${PYTEST_SECONDS:-240} python3 -m pytest -q -p no:cacheprovider -rfE -s --tb=short \
    tests/numba/test_cuda_device.py 2>&1 | tee "$OUT/pytest.log" | grep -v "^$" | tail -60
timeout ${BENCH_SECONDS:-200} python3 benchmarks/cuda_check.py ${BENCH_ARGS:---quick --compile} \
    2>&1 | tee "$OUT/bench.log"
