"""``import polyprof`` and the Kineto reader stay light: no pyarrow or pandas until used.

pyarrow alone adds ~30 MB RSS and ~0.1 s at import; the crash journal used to import
it at module level, so every ``import polyprof`` (and every trace load) paid for it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def test_import_polyprof_and_kineto_reader_without_pyarrow_or_pandas():
    code = ("import sys, polyprof, polyprof.formats.kineto, polyprof.collect.journal as j; "
            "print(sorted(m for m in ('pyarrow', 'pandas') if m in sys.modules))")
    env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"


def test_journal_schema_still_available():
    from polyprof.collect import journal

    assert journal.SCHEMA is journal.schema()
    assert journal.SCHEMA.names[:3] == ["kind", "name", "start_ns"]
