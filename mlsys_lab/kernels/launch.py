"""A kernel launch with everything but the arrays decided once: ``cuLaunchKernel`` on a pre-packed argument list.

    plan = PackedLaunch(raw_kernel, grid=(64, 64), block=(128,), shared_mem=0, n_arrays=3,
                        scalars=(np.int32(m), np.int32(n), np.int32(k)))
    plan(a, b, c)            # same as raw_kernel(grid, block, (a, b, c) + scalars, shared_mem=0)

What a launch costs the host (measured on the H200 machine, ``benchmarks/tensor_cores.py`` and lesson 04 §8.3):
the driver's ``cuLaunchKernel`` alone takes about 5 µs there; calling a ``cupy.RawKernel`` takes 9–10 µs,
because CuPy inspects and converts every argument on every call (its type, a C struct per array, a
``np.int32`` per scalar) before it calls the driver. A launcher that is called with the same shapes again and
again can do that work once: the scalars are packed into the argument buffer when the plan is made, and a call
writes the arrays' device addresses into it and calls the driver. The kernel's parameters are read by
``cuLaunchKernel`` at the call (CUDA copies them), so the buffer can be reused by the next call.

Each kernel parameter is passed as a pointer to its value (the ``kernelParams`` convention of the driver API);
the values sit in 8-byte slots of one buffer: a device pointer fills a slot, a 4-byte scalar its low half
(little-endian, as every CUDA host is).
"""

from __future__ import annotations

import threading

import numpy as np

from mlsys_lab import backend

SLOT_BYTES = 8


def pack_arguments(n_arrays: int, scalars: tuple) -> np.ndarray:
    """The argument slots of a launch: ``n_arrays`` zeroed pointer slots, then one slot per NumPy scalar.

    >>> pack_arguments(1, (np.int32(7), np.float32(1.0))).tolist()
    [0, 7, 1065353216]
    """
    if not isinstance(n_arrays, int) or not 0 <= n_arrays <= 4096:
        raise ValueError(f"n_arrays must be an int in [0, 4096]; got {n_arrays!r:.40}")
    if not isinstance(scalars, (tuple, list)):
        raise TypeError(f"scalars must be a tuple of NumPy scalars (np.int32(7), ...); got {scalars!r:.40}")
    slots = np.zeros(n_arrays + len(scalars), dtype=np.uint64)
    raw = slots.view(np.uint8)
    for index, value in enumerate(scalars):
        if not isinstance(value, np.generic) or value.nbytes > SLOT_BYTES:
            raise TypeError(f"scalars[{index}] must be a NumPy scalar of at most 8 bytes (np.int32, np.float32, "
                            f"...) so that its C type is known, got {type(value).__name__}")
        start = (n_arrays + index) * SLOT_BYTES
        raw[start:start + value.nbytes] = np.frombuffer(value.tobytes(), dtype=np.uint8)
    return slots


class PackedLaunch:
    """``raw_kernel(grid, block, arrays + scalars, shared_mem=...)`` with grid, block, shared memory and scalars
    fixed at construction; ``plan(*arrays)`` launches on the current stream (GPU only).

    Each thread gets its own argument buffer, so plans may be shared between threads.
    """

    def __init__(self, raw_kernel, grid: tuple, block: tuple, shared_mem: int, n_arrays: int, scalars: tuple = ()):
        xp = backend.xp
        self._driver = xp.cuda.driver
        self._launch_kernel = xp.cuda.driver.launchKernel
        self._current_stream = xp.cuda.get_current_stream
        self._function = raw_kernel.kernel.ptr  # compiles on first use; attributes set on raw_kernel stay
        self._context = self._driver.ctxGetCurrent()  # the function belongs to this context
        grid, block = (tuple(grid) + (1, 1))[:3], (tuple(block) + (1, 1))[:3]
        self.geometry = (*map(int, grid), *map(int, block), int(shared_mem))
        self.n_arrays, self.scalars = n_arrays, tuple(scalars)
        self._template = pack_arguments(n_arrays, self.scalars)
        self._local = threading.local()

    def _buffers(self) -> tuple[np.ndarray, int]:
        """This thread's argument buffer, made on its first call. The driver API has a current context per
        thread, and a thread that has not used CUDA yet has none: make the plan's context current there
        (what CuPy's own launch does through the runtime)."""
        if self._driver.ctxGetCurrent() != self._context:
            self._driver.ctxSetCurrent(self._context)
        slots = self._template.copy()
        pointers = slots.ctypes.data + SLOT_BYTES * np.arange(len(slots), dtype=np.uint64)
        self._local.buffers = buffers = (slots, pointers, pointers.ctypes.data)
        return buffers

    def __call__(self, *arrays) -> None:
        if len(arrays) != self.n_arrays:
            raise TypeError(f"this launch takes {self.n_arrays} device arrays, got {len(arrays)}")
        buffers = getattr(self._local, "buffers", None) or self._buffers()
        slots = buffers[0]
        for index, array in enumerate(arrays):
            slots[index] = array.data.ptr
        self._launch_kernel(self._function, *self.geometry, self._current_stream().ptr, buffers[2], 0)
