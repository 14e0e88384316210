"""Built-in plugins, each registered under the entry-point group ``polyprof.plugins``."""

from .._lazy import lazy_names

__getattr__ = lazy_names(__name__, {})  # its submodules as attributes, on first use (_lazy.submodule)
