"""The Numba executor's two backends and the scalar libraries their kernels call.

``cpu.py`` renders a plan (``plan.py``) into ``numba.njit`` kernels over raw pointers,
calling ``mathlib`` (vmath, libm, half conversions, as ``m``) and ``runtime`` (pointer
intrinsics, integer loops, as ``rt``), with ``threads`` setting up Numba's thread pool.
``cuda.py`` renders the same plan into a ``numba.cuda`` grid-stride kernel calling
``libdevice`` (as ``cl``); it is imported only when CUDA is used. ``halfbits`` holds the
float16/bfloat16 conversions as LLVM IR, for both.
"""
