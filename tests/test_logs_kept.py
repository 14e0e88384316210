"""A program's ``logging.config`` does not switch polyprof's logger off: ``dictConfig``
and ``fileConfig`` disable every logger that exists and that they do not name
(``disable_existing_loggers``, on by default), and under ``polyprof run`` the program
then never heard that its trace was written elsewhere or that a plugin failed (an
auditor: a full disk's warning and error gone)."""

from __future__ import annotations

import logging
import logging.config
import subprocess
import sys
from pathlib import Path

from polyprof import logs


def test_dict_config_leaves_polyprofs_loggers_on() -> None:
    from polyprof.formats import rocm_trace  # (a module's own logger, made at its import, before the config)

    log = logs.kept()
    serve = logs.kept("polyprof.serve")
    before = logging.root.handlers[:], logging.root.level
    loggers = {lg: lg.disabled for lg in logging.root.manager.loggerDict.values() if isinstance(lg, logging.Logger)}
    got: list[str] = []
    try:
        logging.config.dictConfig({"version": 1, "root": {"level": "WARNING", "handlers": []}})
        handler = logging.Handler()
        handler.emit = lambda r: got.append(r.getMessage())  # type: ignore[method-assign]
        logging.root.addHandler(handler)
        log.warning("kept")
        serve.warning("served")
        assert got == ["kept", "served"]
        assert not log.disabled and not serve.disabled and not rocm_trace.log.disabled
    finally:
        logging.root.handlers[:], logging.root.level = before  # (pytest's own handlers back)
        for lg, off in loggers.items():  # (dictConfig switched every other logger off: the later tests' too)
            lg.disabled = off


def test_a_program_configuring_logging_still_hears_polyprof(tmp_path: Path) -> None:
    """polyprof's warning of a bad session option, said while the program runs, after the
    program's dictConfig: it reaches the program's root handler (stderr here)."""
    script = tmp_path / "prog.py"
    script.write_text(
        "import logging, logging.config, sys\n"
        "import polyprof\n"
        "logging.config.dictConfig({'version': 1, 'handlers': {'e': {'class': 'logging.StreamHandler'}},"
        " 'root': {'level': 'WARNING', 'handlers': ['e']}})\n"
        "logging.getLogger('polyprof').warning('a warning of polyprof')\n"
        "print('ok')\n")
    r = subprocess.run([sys.executable, "-m", "polyprof", "run", "--no-summary", "-o", str(tmp_path / "t.polyprof"),
                        str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr
    assert "a warning of polyprof" in r.stderr, r.stderr
