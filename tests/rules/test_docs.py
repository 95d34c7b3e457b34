"""docs/rules.md is generated from the rule classes and must be up to date; `torchport rule` works."""

from __future__ import annotations

from pathlib import Path

from torchport.cli.main import main
from torchport.cli.rule import catalogue_markdown

DOCS = Path(__file__).resolve().parents[2] / "docs" / "rules.md"


def test_catalogue_page_is_up_to_date():
    assert DOCS.read_text() == catalogue_markdown(), (
        "docs/rules.md is stale: regenerate it with "
        "'torchport rule --all --output-format markdown > docs/rules.md'"
    )


def test_rule_command(capsys):
    assert main(["rule", "TP201"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("TP201 cuda-synchronize") and "**Use instead**" in out
    assert main(["rule", "--all"]) == 0
    assert len(capsys.readouterr().out.splitlines()) >= 35
    assert main(["rule", "TP999"]) == 2
    assert "Unknown rule" in capsys.readouterr().err
