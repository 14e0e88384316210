"""Every polyprof module is reachable by its dotted name after a plain ``import polyprof``,
as the docs spell functions (``polyprof.formats.safety.override``, docs/reliability.md;
``polyprof.analyze.critical_path.critical_path``, docs/analysis.md): before, only the
modules something had already imported were, and the docs' spellings raised
AttributeError. A name that is no module is still an AttributeError."""

from __future__ import annotations

import subprocess
import sys

_PROGRAM = """
import sys
import polyprof
assert "polyprof.formats.safety" not in sys.modules
print(polyprof.formats.safety.override.__name__)
print(polyprof.analyze.critical_path.critical_path.__name__)
print(polyprof.analyze.collectives.collective_summary.__name__)
print(polyprof.report.tables.build.__name__)
print(polyprof.capture.TLSFiles.__name__)
print(polyprof.writers.kineto.__name__)
print(polyprof.analyze.memory.__name__, polyprof.analyze.memory_peak.__name__)
for where, name in ((polyprof, "nosuch"), (polyprof.formats, "nosuch"), (polyprof.report, "_private")):
    try:
        getattr(where, name)
    except AttributeError as e:
        print("AttributeError:", e)
"""


def test_modules_by_their_dotted_names_after_import_polyprof():
    p = subprocess.run([sys.executable, "-c", _PROGRAM], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == [
        "override", "critical_path", "collective_summary", "build", "TLSFiles", "polyprof.writers.kineto",
        "polyprof.analyze.memory memory_peak",
        "AttributeError: module 'polyprof' has no attribute 'nosuch'",
        "AttributeError: module 'polyprof.formats' has no attribute 'nosuch'",
        "AttributeError: module 'polyprof.report' has no attribute '_private'"]
