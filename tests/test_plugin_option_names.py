"""A plugin option the plugin does not read is warned of, with the nearest it does (a
misspelt ``{"torch": {"record_shape": True}}`` or ``{"host": {"sample_interval": 0.01}}``
was ignored without a word: MFU stayed unknown while the user believed shapes were
recorded); and each built-in plugin's declared ``option_names`` are exactly the options
its code reads, so the declaration cannot go stale."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import polyprof
from polyprof.plugins.cupti.plugin import CuptiPlugin
from polyprof.plugins.host import HostPlugin
from polyprof.plugins.jax import JaxPlugin
from polyprof.plugins.opencl.plugin import OpenCLPlugin
from polyprof.plugins.torch.plugin import TorchPlugin

SRC = Path(polyprof.__file__).parent


def test_a_misspelt_option_is_warned_of_with_the_nearest_name(tmp_path, caplog):
    with polyprof.profile(output=tmp_path / "t.polyprof", plugins=["host"],
                          options={"host": {"sample_interval": 0.01, "nvtx": False}}) as prof:
        with polyprof.section("work"):
            sum(range(1000))
    warned = [w for w in prof.trace.metadata["warnings"] if "sample_interval" in str(w)]
    assert warned == ["host: option 'sample_interval' is not one it reads, so it is ignored; did you mean "
                      "'sample_interval_s'? (its options: journal_interval_s, keep_open_sections, max_events, nvtx, "
                      "nvtx_max_events, sample_interval_s)"]
    assert not [w for w in prof.trace.metadata["warnings"] if "'nvtx'" in str(w)]  # a known one: no word
    assert "did you mean 'sample_interval_s'" in caplog.text


def _read_keys(paths: list[Path]) -> set[str]:
    """The option names the code reads: ``options.get("k")``, ``o.get("k")``, ``o["k"]``,
    ``"k" in o`` where ``o`` is ``self.options`` / ``p.options`` or a local bound to it."""
    keys: set[str] = set()
    for path in paths:
        tree = ast.parse(path.read_text())
        aliases = {"options"}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute)
                    and node.value.attr == "options" and isinstance(node.targets[0], ast.Name)):
                aliases.add(node.targets[0].id)

        def is_options(e: ast.expr, aliases: set[str] = aliases) -> bool:
            return (isinstance(e, ast.Attribute) and e.attr == "options") or (isinstance(e, ast.Name)
                                                                             and e.id in aliases)

        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                    and is_options(node.func.value) and node.args and isinstance(node.args[0], ast.Constant)):
                keys.add(node.args[0].value)
            elif (isinstance(node, ast.Subscript) and is_options(node.value)
                  and isinstance(node.slice, ast.Constant)):
                keys.add(node.slice.value)
            elif (isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant)
                  and isinstance(node.ops[0], (ast.In, ast.NotIn)) and is_options(node.comparators[0])):
                keys.add(node.left.value)
    return keys


@pytest.mark.parametrize("plugin,files", [
    (HostPlugin, ["plugins/host.py"]),
    (TorchPlugin, ["plugins/torch/plugin.py", "plugins/torch/captures.py", "plugins/torch/handover.py"]),
    (JaxPlugin, ["plugins/jax.py", "plugins/jax_xspace.py", "plugins/jax_handover.py"]),
    (OpenCLPlugin, ["plugins/opencl/plugin.py"]),
    (CuptiPlugin, ["plugins/cupti/plugin.py"]),
], ids=lambda v: getattr(v, "name", "files"))
def test_declared_option_names_are_those_the_plugin_reads(plugin, files):
    read = _read_keys([SRC / f for f in files]) - {"memory"}
    if plugin is TorchPlugin:  # (passed on to torch.profiler by a loop over their names)
        read |= {"record_shapes", "profile_memory", "with_stack", "with_flops", "with_modules"}
    assert plugin.option_names == read
