"""The static rule catalogue: one rule per file under rules/<family>/.

`scan` reports what the rules find, `fix` applies their rewrites, `rule` prints their docs.
"""

from torchport.rules.base import Example, Finding, Fix, FixSafety, Rule, Severity, TARGETS
from torchport.rules.registry import all_rules, get_rule, select_rules

__all__ = [
    "Example",
    "Finding",
    "Fix",
    "FixSafety",
    "Rule",
    "Severity",
    "TARGETS",
    "all_rules",
    "get_rule",
    "select_rules",
]
