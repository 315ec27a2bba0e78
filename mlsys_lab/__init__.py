"""mlsys-lab: an interactive course on machine-learning systems.

The package is the library behind the notebooks: one topic module per lesson, each a set of pure,
tested functions. Importing it is cheap and never touches the GPU; ``mlsys_lab.backend`` chooses the
array module (CuPy or NumPy) the first time it is imported.
"""

__version__ = "0.1.0"
