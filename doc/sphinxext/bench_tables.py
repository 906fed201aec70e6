"""The ``bench-table`` directive: a table of recorded benchmark results.

``.. bench-table:: NAME`` renders ``benchmarks/tables.py``'s table ``NAME``
from the JSON files under ``benchmarks/results/`` when the documentation is
built, so that the pages show what the results files hold and a
re-measurement edits only those files. The directive's content, if any, is
the table's caption.
"""

import sys
from pathlib import Path

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import tables  # noqa: E402


class BenchTable(SphinxDirective):
    required_arguments = 1
    has_content = True

    def run(self):
        name = self.arguments[0]
        if name not in tables.TABLES:
            raise self.error(f"bench-table: no table {name!r} in benchmarks/tables.py "
                             f"(known: {', '.join(sorted(tables.TABLES))})")
        table = tables.TABLES[name]()
        # the page is rebuilt when a results file changes
        for path in tables.RESULTS.glob("*.json"):
            self.env.note_dependency(str(path))
        container = nodes.container(classes=["bench-table"])
        lines = table.rst().splitlines()
        lines += ["", f"*Command:* ``{table.source}``"]
        if self.content:
            lines += [""] + list(self.content)
        self.state.nested_parse(StringList(lines, source=f"bench-table {name}"),
                                self.content_offset, container)
        return [container]


def setup(app):
    app.add_directive("bench-table", BenchTable)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
