"""NumPy imported with one BLAS thread, for commands that do no linear algebra (see the
package doc)."""

from __future__ import annotations

import os
import sys

#: the variable NumPy's OpenBLAS (its wheels' BLAS) reads once, when it is loaded
VARIABLE = "OPENBLAS_NUM_THREADS"


def import_numpy_single_threaded() -> bool:
    """Import NumPy with its OpenBLAS told to start no thread pool, then put the
    environment back as it was (child processes see what the user set). Nothing is done
    where NumPy is already imported or the user set the variable. Returns whether it
    was done."""
    if "numpy" in sys.modules or VARIABLE in os.environ:
        return False
    os.environ[VARIABLE] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        del os.environ[VARIABLE]
    return True
