"""No private pandas name anywhere in src/ (issue 27): polyprof uses pandas only at the
edge (``Table.to_pandas``, ``Trace.to_pandas``, ``factorize`` when pandas is loaded)
and only through its public API, so a pandas release cannot break it underneath."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

#: private names of pandas' objects polyprof once reached for (DataFrame._from_arrays,
#: Index._simple_new, DataFrame._get_column_array, the block manager, ExtensionArray
#: constructors), looked for as text too: ``getattr(pd.Index, "_simple_new")`` counts
PRIVATE_NAMES = ("_from_arrays", "_simple_new", "_get_column_array", "_mgr", "_from_sequence", "_constructor",
                 "_ixs", "_set_item", "_get_item_cache", "_reindex_with_indexers", "_values_for_argsort")
#: pandas' public modules: pandas itself and pandas.api (pandas.core, pandas._libs,
#: pandas.util._* and the like are its internals)
PUBLIC = re.compile(r"^pandas(\.api(\.[a-z]\w*)*|\.errors|\.testing|\.plotting|\.tseries\.offsets)?$")


def private_uses(path: Path) -> list[str]:
    """Where ``path`` imports a pandas internal module, reads an underscore attribute of
    pandas (or its ``pd`` alias), or names one of :data:`PRIVATE_NAMES`."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text, str(path))
    aliases = {"pandas"}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "pandas":
                    aliases.add(a.asname or "pandas")
                    if not PUBLIC.match(a.name):
                        out.append(f"{path.name}:{node.lineno} import {a.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "pandas":
            if not PUBLIC.match(node.module) or any(a.name.startswith("_") for a in node.names):
                out.append(f"{path.name}:{node.lineno} from {node.module} import ...")
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in aliases:
                out.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
    for name in PRIVATE_NAMES:
        for m in re.finditer(rf"\b{name}\b", text):
            out.append(f"{path.name}:{text.count(chr(10), 0, m.start()) + 1} {name}")
    return out


def test_src_uses_no_private_pandas_name():
    found = [u for p in sorted(SRC.rglob("*.py")) for u in private_uses(p)]
    assert not found, "private pandas names in src/: " + "; ".join(found)


def test_the_check_finds_each_kind_of_private_use(tmp_path):
    """The check itself, on a module that does each thing it must catch (and the public
    uses it must let through)."""
    bad = tmp_path / "bad.py"
    bad.write_text("import pandas as pd\n"
                   "from pandas.core.sorting import nargsort\n"
                   "import pandas._libs.lib\n"
                   "from pandas import _testing\n"
                   "df = pd.DataFrame._from_arrays([], columns=[], index=None)\n"
                   "ix = getattr(pd.Index, '_simple_new')\n"
                   "x = pd.core.arrays\n"
                   "y = pd._libs\n")
    found = private_uses(bad)
    for what in ("from pandas.core.sorting", "import pandas._libs.lib", "from pandas import",
                 "pd.DataFrame._from_arrays", "_simple_new", "pd._libs"):
        assert any(what in f for f in found), (what, found)
    good = tmp_path / "good.py"
    good.write_text("import pandas as pd\nfrom pandas.api.types import infer_dtype\n"
                    "df = pd.DataFrame({'a': [1]})\ncodes, uniq = pd.factorize(df['a'])\n"
                    "class T:\n    __slots__ = ('_data',)\n")
    assert private_uses(good) == []


def test_no_analysis_says_it_returns_a_dataframe():
    """Every analysis returns a Table (issue 27): no ``-> pd.DataFrame`` annotation in
    analyze/, report/ or ranks/ but the conversions at the edge (``Table.to_pandas``)."""
    found = []
    for pkg in ("analyze", "report", "ranks"):
        for p in sorted((SRC / "polyprof" / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None \
                        and "DataFrame" in ast.unparse(node.returns) and node.name != "to_pandas":
                    found.append(f"{pkg}/{p.name}:{node.lineno} {node.name}")
    assert not found, "analyses annotated as returning DataFrames: " + "; ".join(found)
