"""Lesson 05, autotuning: searching kernel configurations (grid, random, model-guided) on recorded measurements.

* :mod:`.search`: Autotuning: search a kernel's configuration space, and ask which coordinates make the search easy.
"""
