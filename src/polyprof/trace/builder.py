"""TraceBuilder: the one way plugins and readers make a Trace.

What it gathers, and how, is the ``Assembler``'s (assemble.py); this adds the Trace
made of the parts, checked. Scalar ``event()`` calls are for small producers; readers
hand whole columns to ``events()`` so large traces never become one Python object per
event.
"""

from __future__ import annotations

from .assemble import Assembler
from .core import Trace


class TraceBuilder(Assembler):
    def build(self, validate: bool = True) -> Trace:
        """The Trace of every part added (checked by ``Trace.validate`` unless told not
        to); building again gives the same trace."""
        trace = Trace(*self.parts())
        return trace.validate() if validate else trace
