"""The rule catalogue: every Rule subclass found in rules/<family>/<rule_name>.py."""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache

from torchport.errors import UsageError
from torchport.rules.base import PythonRule, Rule, TextRule

__all__ = ["all_rules", "get_rule", "select_rules", "FAMILIES"]

#: Rule families, in catalogue order; each is a sub-package of torchport.rules.
FAMILIES: tuple[str, ...] = ("device", "runtime", "distributed", "hazards", "nonportable", "files")


@lru_cache(maxsize=1)
def all_rules() -> tuple[type[Rule], ...]:
    """Every rule class, sorted by code. Raises on a duplicated code (a catalogue bug)."""
    found: dict[str, type[Rule]] = {}
    for family in FAMILIES:
        package = importlib.import_module(f"torchport.rules.{family}")
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda item: item.name):
            module = importlib.import_module(f"torchport.rules.{family}.{info.name}")
            for value in vars(module).values():
                if (
                    isinstance(value, type)
                    and issubclass(value, Rule)
                    and value.__module__ == module.__name__
                    and getattr(value, "code", None)
                ):
                    if value.code in found:
                        raise RuntimeError(f"rule code {value.code} is defined twice: {found[value.code]} and {value}")
                    found[value.code] = value
    return tuple(found[code] for code in sorted(found))


def get_rule(code: str) -> type[Rule]:
    """The rule with `code` (or kebab-case name); raises UsageError naming the valid codes."""
    wanted = code.strip()
    for rule in all_rules():
        if rule.code == wanted.upper() or rule.name == wanted.lower():
            return rule
    codes = ", ".join(rule.code for rule in all_rules())
    raise UsageError(f"Unknown rule {code!r}. Known rules: {codes}. Run 'torchport rule --all' to list them.")


def _matches(rule: type[Rule], selector: str) -> bool:
    selector = selector.strip().upper()
    return selector == "ALL" or rule.code.startswith(selector)


def select_rules(select: list[str] | None = None, ignore: list[str] | None = None) -> list[type[Rule]]:
    """Rules picked by code prefixes (`TP1`, `TP101`, `ALL`), minus ignored prefixes.

    Unknown selectors raise UsageError: a typo must not silently select nothing.
    """
    rules = all_rules()
    for selector in [*(select or []), *(ignore or [])]:
        if not any(_matches(rule, selector) for rule in rules):
            raise UsageError(
                f"Selector {selector!r} matches no rule. Use a code or prefix such as TP1 or TP101, or ALL; "
                "run 'torchport rule --all' for the catalogue."
            )
    chosen = [rule for rule in rules if not select or any(_matches(rule, item) for item in select)]
    return [rule for rule in chosen if not any(_matches(rule, item) for item in ignore or [])]


def python_rules(rules: list[type[Rule]]) -> list[type[PythonRule]]:
    """The Python-source rules among `rules`."""
    return [rule for rule in rules if issubclass(rule, PythonRule)]


def text_rules(rules: list[type[Rule]]) -> list[type[TextRule]]:
    """The non-Python-file rules among `rules`."""
    return [rule for rule in rules if issubclass(rule, TextRule)]
