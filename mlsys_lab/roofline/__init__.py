"""Lesson 03, the roofline: ceilings of a machine, operators placed under them, Little's law.

* :mod:`.model`: The roofline model and Little's law: how fast an operator can possibly run on given hardware.
"""
