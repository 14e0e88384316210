"""Whether the cupti plugin can run here, and why not in one line (no cupti-python, no
driver, no device). Its own module, apart from device.py: every `polyprof run` asks a
default session's question (:func:`session_problem`), and that needs none of the
buffers' layouts and sinks device.py imports."""

from __future__ import annotations

import ctypes
import importlib.util

INSTALL_HINT = "pip install 'polyprof[cuda]'"


def first_line(e: BaseException) -> str:
    """An exception in one line: its type and the first line of its text."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def session_problem() -> str | None:
    """Why CUPTI cannot run here, from what costs nothing to ask (no driver call): the
    binding is installed and the NVIDIA driver's library loads. None: it may run."""
    try:
        found = importlib.util.find_spec("cupti") is not None
    except (ImportError, ValueError) as e:
        return f"cupti-python cannot be found ({e})"
    if not found:
        return f"cupti-python is not installed ({INSTALL_HINT})"
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return f"no NVIDIA driver here (libcuda.so.1 does not load: {str(e).split(':')[-1].strip()})"
    return None


def problem() -> str | None:
    """:func:`session_problem`, then a device and CUPTI itself: cuInit, the device
    count, a CUPTI timestamp. None: CUPTI can record here."""
    why = session_problem()
    if why:
        return why
    try:
        from cupti import cupti as binding
    except Exception as e:
        return f"cupti-python does not import ({first_line(e)})"
    try:
        from cuda.bindings import driver

        err, = driver.cuInit(0)[:1]
        if int(err) != 0:
            return f"the CUDA driver does not initialise (cuInit: {err.name if hasattr(err, 'name') else err})"
        err, count = driver.cuDeviceGetCount()
        if int(err) != 0 or count == 0:
            return "no CUDA device here (cuDeviceGetCount: 0)"
    except ImportError:
        pass  # cuda-bindings comes with cupti-python; without it CUPTI answers below
    except Exception as e:
        return f"the CUDA driver cannot be asked for devices ({first_line(e)})"
    try:
        binding.get_timestamp()
    except Exception as e:
        return f"CUPTI does not run here ({first_line(e)})"
    return None
