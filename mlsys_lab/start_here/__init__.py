"""Lesson 00, start here: what a tensor costs to move over each link of a machine.

* :mod:`.transfers`: the bytes of a tensor, the time to stream them over each data path, whether they fit.

The machines themselves (datasheet presets, a probe of this one) are the shared floor's
:mod:`mlsys_lab.hardware`.
"""

from mlsys_lab.start_here.transfers import fits_in_memory, tensor_bytes, transfer_times

__all__ = ["tensor_bytes", "transfer_times", "fits_in_memory"]
