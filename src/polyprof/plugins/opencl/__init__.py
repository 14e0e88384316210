"""OpenCL device plugin (pyopencl): see plugin.py."""

from .plugin import OpenCLPlugin

__all__ = ["OpenCLPlugin"]
