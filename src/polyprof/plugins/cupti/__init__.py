"""CUDA device plugin on NVIDIA's cupti-python (CUPTI's activity API): see plugin.py."""

from .plugin import CuptiPlugin

__all__ = ["CuptiPlugin"]
