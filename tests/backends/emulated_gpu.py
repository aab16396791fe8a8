"""A pytest plugin for a dry run of the GPU tests on a machine without a GPU: the CUDA
backend's ``gpu_devices`` answers JAX's CPU devices, so every case of the ``gpu`` place runs
the custom calls on the CPU device, under the host emulation of CUDA (``make gpu-dry-run``).

What it checks is the GPU tests' own code (fixtures, parameters, marks, assertions) before a
lent GPU's device time is spent on it: the cases compare the emulated kernels with ``jax`` on
the CPU, which the emulated tests do anyway. Not a GPU check: the kernels' behaviour on a GPU
(memory model, atomics, XLA's GPU numerics) is what only the GPU shows.
"""

from __future__ import annotations

import jax

from drlhet.backends import cuda


def _cpu_devices() -> list:
    return jax.devices("cpu")


cuda.gpu_devices = _cpu_devices
