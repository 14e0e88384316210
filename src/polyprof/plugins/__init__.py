"""Built-in plugins, each registered under the entry-point group ``polyprof.plugins``."""
