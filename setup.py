"""Builds the optional C extension behind ``polyprof.section`` (polyprof.collect._fastsection).

Everything else is declared in pyproject.toml. ``optional=True``: without a C compiler the
build warns and goes on, and polyprof uses its pure-Python section instead
(``polyprof.collect.recorder.IMPLEMENTATION == "python"``).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("polyprof.collect._fastsection", ["src/polyprof/collect/_fastsection.c"],
                             optional=True)])
