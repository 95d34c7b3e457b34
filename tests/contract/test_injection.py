"""The contract for what reports show: names from a user's code (paths, module names, the workload)
are escaped in HTML, Markdown and on the terminal, so none of them becomes markup or a terminal
control sequence."""

from __future__ import annotations

from collections import Counter

import torch
from markdown_it import MarkdownIt

from torchport.check.census import Census, OpRecord
from torchport.check.report import build_report
from torchport.display import markdown_code, markdown_text, terminal_safe
from torchport.profiles import load

HOSTILE = "x`</code><img src=x onerror=alert(1)>|\x1b[2J\nend"


def _check_report():
    census = Census(load("neuron"))
    census.ops["aten::nonzero"] = OpRecord("aten::nonzero", "unsupported", 1, Counter({f"{HOSTILE}.py:3 in f": 1}))
    return build_report(census, numeric_effect=None, buckets=None, workload=f"{HOSTILE}.py")


def test_check_html_report_escapes_the_workload_and_call_sites():
    page = _check_report().html()
    assert "<img" not in page and "&lt;img src=x" in page
    assert page.count("<code>") == page.count("</code>")


def test_check_text_report_has_no_control_characters():
    text = _check_report().text()
    assert "\x1b" not in text and "\\x1b[2J\\nend.py" in text
    assert all(line.isprintable() for line in text.splitlines())


def _html(markdown: str) -> str:
    return MarkdownIt("commonmark").enable("table").render(markdown)


def test_markdown_helpers_keep_hostile_names_literal():
    for rendered in (_html(f"Model {markdown_code(HOSTILE)}."), _html(f"| a |\n|---|\n| {markdown_text(HOSTILE)} |")):
        assert "<img" not in rendered and "alert(1)" in rendered
    assert "\x1b" not in markdown_code(HOSTILE) and "\n" not in markdown_text(HOSTILE)
    assert terminal_safe("a\u202eb\tc") == "a\\u202eb\tc"


class _Named(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.add_module(HOSTILE.replace(".", ""), torch.nn.Linear(2, 2))

    def forward(self, x):
        return next(iter(self.children()))(x)


def test_compare_markdown_keeps_a_module_name_with_backticks_and_html_literal():
    from torchport.compare.api import compare
    from torchport.compare.reports.markdown import render_markdown

    result = compare(_Named(), torch.randn(3, 2), reference="cpu", target="cpu:bf16", performance=False,
                     model_name=HOSTILE)
    markdown = render_markdown(result)
    assert "\x1b" not in markdown
    rendered = _html(markdown)
    assert "<img" not in rendered and "alert(1)" in rendered
