"""Jupyter notebooks (`.ipynb`) as Python source, for `scan` and `fix`.

A notebook's code cells, in order, form one Python module: a name imported in one cell is known in
the next, as in the kernel. IPython lines (`%magic`, `!shell`, `?help`) become comments while the
rules read the cells, and are restored as they were. Findings are numbered through the code cells
in order (the first line of the second cell follows the last line of the first). `fix` rewrites the
cells and writes the notebook back as JSON in nbformat's layout (one-space indent), outputs and
metadata untouched.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["NotebookError", "load", "to_python", "from_python", "dump", "analyze_notebook"]

#: The comment line that separates cells in the joined source.
_CELL_MARK = "# <torchport cell {index}>"
_CELL_MARK_PATTERN = re.compile(r"^# <torchport cell (\d+)>\n", re.MULTILINE)
_IPYTHON_LINE = re.compile(r"^(\s*)([%!?].*)$")
_IPYTHON_MARK = "#<torchport ipython> "


class NotebookError(ValueError):
    """The file is not a notebook this module can read."""


def load(raw: bytes) -> dict[str, Any]:
    """The notebook's JSON; NotebookError when it is not one."""
    try:
        notebook = json.loads(raw.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise NotebookError(f"not a notebook: invalid JSON ({error})") from error
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        raise NotebookError("not a notebook: no 'cells' list")
    return notebook


def _cell_text(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def _code_cells(notebook: dict[str, Any]) -> list[dict[str, Any]]:
    return [cell for cell in notebook["cells"] if isinstance(cell, dict) and cell.get("cell_type") == "code"]


def _hide_ipython(line: str) -> str:
    match = _IPYTHON_LINE.match(line)
    return f"{match.group(1)}{_IPYTHON_MARK}{match.group(2)}" if match else line


def to_python(notebook: dict[str, Any], marks: bool = False) -> str:
    """The code cells joined as one module; with `marks`, each cell starts with a marker comment
    (for `from_python`), without them line numbers run through the cells."""
    pieces = []
    for index, cell in enumerate(_code_cells(notebook)):
        text = "\n".join(_hide_ipython(line) for line in _cell_text(cell).split("\n"))
        if not text.endswith("\n"):
            text += "\n"
        pieces.append((_CELL_MARK.format(index=index) + "\n" if marks else "") + text)
    return "".join(pieces)


def from_python(notebook: dict[str, Any], source: str) -> dict[str, Any]:
    """`notebook` with its code cells replaced by the cells of `source` (made by
    `to_python(marks=True)` and then rewritten). Lines a fix added before the first cell (an
    import) go to the first cell."""
    parts = _CELL_MARK_PATTERN.split(source)
    head, numbered = parts[0], parts[1:]
    texts: dict[int, str] = {int(numbered[i]): numbered[i + 1] for i in range(0, len(numbered), 2)}
    cells = _code_cells(notebook)
    if sorted(texts) != list(range(len(cells))):
        raise NotebookError("the cell markers did not survive the rewrite")
    for index, cell in enumerate(cells):
        text = (head if index == 0 else "") + texts[index]
        text = "\n".join(line.replace(_IPYTHON_MARK, "", 1) for line in text.split("\n"))
        if not _cell_text(cell).endswith("\n"):
            text = text[:-1] if text.endswith("\n") else text
        if text == _cell_text(cell):
            continue
        if isinstance(cell.get("source"), list):
            cell["source"] = text.splitlines(keepends=True)
        else:
            cell["source"] = text
    return notebook


def dump(notebook: dict[str, Any]) -> str:
    """The notebook as nbformat writes it."""
    return json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"


def analyze_notebook(raw: bytes, path: str, codes: tuple[str, ...]):
    """Scan findings of the Python rules in `codes` over the notebook's code cells."""
    from torchport.rules.engine import FileResult, analyze_python

    try:
        notebook = load(raw)
    except NotebookError as error:
        return FileResult(path, error=str(error))
    return analyze_python(to_python(notebook).encode("utf-8"), path, codes)
