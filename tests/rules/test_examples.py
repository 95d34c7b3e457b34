"""Every rule's embedded VALID and INVALID examples, run as tests (the examples ARE the tests)."""

from __future__ import annotations

import pytest

from torchport.rules import all_rules
from torchport.rules.engine import analyze
from torchport.scan.files import file_kind

CASES = [
    pytest.param(rule, kind, index, example, id=f"{rule.code}-{kind}-{index}")
    for rule in all_rules()
    for kind in ("valid", "invalid")
    for index, example in enumerate(rule.examples(kind))
]


def _findings(rule, example):
    kind = file_kind(example.filename)
    if kind is None:
        # A file no rule reads (e.g. a .cpp VALID example of the .cu rule) can have no finding.
        return []
    result = analyze(example.source.encode(), example.filename, kind, (rule.code,))
    assert result.error is None, f"{rule.code}: example did not parse: {result.error}"
    return result.findings


@pytest.mark.parametrize(("rule", "kind", "index", "example"), CASES)
def test_rule_example(rule, kind, index, example):
    findings = _findings(rule, example)
    if kind == "valid":
        assert findings == [], f"{rule.code} flagged a VALID example:\n{example.source}\n{findings}"
        return
    assert findings, f"{rule.code} missed an INVALID example:\n{example.source}"
    if example.count is not None:
        assert len(findings) == example.count
    assert all(finding.code == rule.code for finding in findings)
    if example.fixed is not None:
        from torchport.fix.engine import fix_source

        fixed = fix_source(example.source, example.filename, codes=(rule.code,), unsafe=True).fixed
        assert fixed == example.fixed, f"{rule.code} fixed the example to:\n{fixed}"
        again = fix_source(fixed, example.filename, codes=(rule.code,), unsafe=True).fixed
        assert again == fixed, f"{rule.code} fix is not idempotent"


@pytest.mark.parametrize("rule", all_rules(), ids=lambda rule: rule.code)
def test_rule_is_documented(rule):
    doc = rule.documentation()
    for section in ("What it does", "Why it matters", "Example", "Use instead", "Fix safety"):
        assert f"**{section}**" in doc, f"{rule.code} docstring lacks the {section!r} section"
    assert rule.message and rule.fix_title and rule.message != rule.fix_title
    assert rule.name == rule.name.lower() and " " not in rule.name
    assert len(rule.VALID) >= 1 and len(rule.INVALID) >= 1
    if rule.fix_safety is not None:
        assert any(example.fixed for example in rule.examples("invalid")) or rule.code in _FIX_SHOWN_ELSEWHERE


#: Rules whose fix is exercised by the program tests in tests/fix instead of an example.
_FIX_SHOWN_ELSEWHERE: set[str] = set()


def test_catalogue_size_and_codes():
    rules = all_rules()
    assert len(rules) >= 35
    codes = [rule.code for rule in rules]
    assert len(codes) == len(set(codes))
    names = [rule.name for rule in rules]
    assert len(names) == len(set(names))
