"""What a rule is: a stable code, a message, a fix title, its documentation and its own examples.

Rules never import torch or libcst at module level: `scan` loads every rule in every worker
process, and must stay cheap. Only `transform` (used by `fix`) touches libcst, lazily.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar, Iterator, Mapping

if TYPE_CHECKING:  # pragma: no cover
    from torchport.rules.context import PythonContext

__all__ = [
    "Severity",
    "TARGETS",
    "targets",
    "DependsOn",
    "FixSafety",
    "Fix",
    "Finding",
    "Example",
    "Rule",
    "PythonRule",
    "TextRule",
]

def targets() -> tuple[str, ...]:
    """The targets a scan can judge readiness for: every registered real backend but cuda (the
    source), third-party ones included. `any` means the worst case over all of them."""
    from torchport import backends

    return backends.targets()


def __getattr__(name: str):
    # TARGETS is read from the backend registry on first use, so a third-party backend counts.
    if name == "TARGETS":
        return targets()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Severity(str, Enum):
    """How much a finding hurts on a target, worst first."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"
    OFF = "off"

    @property
    def rank(self) -> int:
        """0 for errors up to 3 for off: smaller is worse."""
        return ("error", "warning", "info", "off").index(self.value)

    @staticmethod
    def per_fact(fact: str, severities: Mapping[Any, "Severity"]) -> "DependsOn":
        """A rule's severity as a function of one profile fact: see DependsOn."""
        return DependsOn(fact, severities)


class FixSafety(str, Enum):
    """Safe fixes keep behaviour where the code ran before; unsafe ones need --unsafe-fixes."""

    SAFE = "safe"
    UNSAFE = "unsafe"


@dataclass(frozen=True)
class DependsOn:
    """A rule's severity as a function of one profile fact (torchport.profiles.FACTS).

    `DependsOn("float64", {"refused": Severity.ERROR, "downcast": Severity.ERROR})` reads the
    target profile's fact and falls back to the rule's `severity` for values it does not list.
    """

    fact: str
    severities: Mapping[Any, Severity]

    def severity(self, target: str, default: Severity) -> Severity:
        """The severity on `target`, from its profile."""
        return self.severities.get(_fact(target, self.fact), default)


_fact_cache: dict[tuple[str, str], Any] = {}


def _fact(target: str, fact: str) -> Any:
    key = (target, fact)
    if key not in _fact_cache:
        from torchport import profiles

        _fact_cache[key] = profiles.load(target).fact(fact)
    return _fact_cache[key]


@dataclass(frozen=True)
class Fix:
    """A rewrite of one source span, applied by `torchport fix` through libcst.

    `replacement` is source text for the node at the finding's span (an expression, or a
    statement when `statement` is true). `edit` names a rule-specific libcst edit instead.
    `needs_torch_import` asks the fixer to add `import torch` when the file has no such binding;
    `imports` names standard-library modules the replacement uses (`import warnings` is added when
    missing). `helper` names a module-level helper of `torchport.fix.neutral.HELPERS` the
    replacement calls, written once into the module after its imports. `legacy` is the replacement
    for a torch that lacks a function `replacement` calls, where `torchport.fix.neutral.adapt`
    cannot derive it.
    """

    safety: FixSafety
    replacement: str | None = None
    edit: str | None = None
    statement: bool = False
    needs_torch_import: bool = False
    imports: tuple[str, ...] = ()
    helper: str | None = None
    legacy: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form."""
        return {
            "safety": self.safety.value,
            "replacement": self.replacement,
            "edit": self.edit,
            "statement": self.statement,
            "needs_torch_import": self.needs_torch_import,
            "imports": list(self.imports),
            "helper": self.helper,
            "legacy": self.legacy,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Fix":
        """The inverse of `to_dict`."""
        return cls(
            safety=FixSafety(data["safety"]),
            replacement=data.get("replacement"),
            edit=data.get("edit"),
            statement=bool(data.get("statement")),
            needs_torch_import=bool(data.get("needs_torch_import")),
            imports=tuple(data.get("imports") or ()),
            helper=data.get("helper"),
            legacy=data.get("legacy"),
        )


@dataclass
class Finding:
    """One place where a rule matched. Lines are 1-based, columns 0-based characters."""

    code: str
    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    message: str
    source_line: str = ""
    fix: Fix | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (also the cache format)."""
        return {
            "code": self.code,
            "path": self.path,
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
            "message": self.message,
            "source_line": self.source_line,
            "fix": self.fix.to_dict() if self.fix else None,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Finding":
        """The inverse of `to_dict`."""
        fix = data.get("fix")
        return cls(
            code=data["code"],
            path=data["path"],
            line=data["line"],
            column=data["column"],
            end_line=data["end_line"],
            end_column=data["end_column"],
            message=data["message"],
            source_line=data.get("source_line", ""),
            fix=Fix.from_dict(fix) if fix else None,
        )


@dataclass(frozen=True)
class Example:
    """An embedded example. For INVALID ones, `fixed` is the expected result of fixing it
    (unsafe fixes included) and `count` the number of findings expected."""

    source: str
    filename: str = "example.py"
    fixed: str | None = None
    count: int | None = None


class Rule:
    """Base class of every rule. Subclasses live one per file under rules/<family>/."""

    #: Stable code, never reused: TP + family digit + number.
    code: ClassVar[str]
    #: Kebab-case name of the pattern.
    name: ClassVar[str]
    #: The problem, one sentence.
    message: ClassVar[str]
    #: The action that removes it, one imperative phrase.
    fix_title: ClassVar[str]
    #: Severity when the target's profile fact has no entry in `target_severity`.
    severity: ClassVar[Severity] = Severity.WARNING
    #: The profile fact the severity depends on (DependsOn), or {} for the same severity everywhere.
    #: A plain {target: severity} table still works for third-party rules, but names targets.
    target_severity: ClassVar[DependsOn | Mapping[str, Severity]] = {}
    #: Whether the rule offers a fix, and how safe it is (None: report only).
    fix_safety: ClassVar[FixSafety | None] = None
    #: Literal byte strings; a Python file holding none of them (nor a `trigger_patterns` match)
    #: cannot match this rule, and only lines holding one are walked. Literals, not regular
    #: expressions, because substring search runs at memory speed and regex alternations do not.
    triggers: ClassVar[tuple[bytes, ...]] = ()
    #: Regular expressions (bytes) for the rare trigger that no literal can express.
    trigger_patterns: ClassVar[tuple[bytes, ...]] = ()
    VALID: ClassVar[tuple[Example | str, ...]] = ()
    INVALID: ClassVar[tuple[Example | str, ...]] = ()

    @classmethod
    def family(cls) -> str:
        """The folder the rule lives in (device, runtime, distributed, hazards, ...)."""
        parts = cls.__module__.split(".")
        return parts[-2] if len(parts) >= 2 else ""

    @classmethod
    def severity_for(cls, target: str) -> Severity:
        """The severity on `target`; for `any`, the worst over every target."""
        if target == "any":
            candidates = [cls.severity_for(name) for name in targets()]
            return min(candidates, key=lambda severity: severity.rank)
        if isinstance(cls.target_severity, DependsOn):
            return cls.target_severity.severity(target, cls.severity)
        return cls.target_severity.get(target, cls.severity)

    @classmethod
    def examples(cls, kind: str) -> list[Example]:
        """VALID or INVALID examples as Example objects."""
        raw = cls.VALID if kind == "valid" else cls.INVALID
        return [item if isinstance(item, Example) else Example(item) for item in raw]

    @classmethod
    def documentation(cls) -> str:
        """The docstring, dedented."""
        import inspect

        return inspect.cleandoc(cls.__doc__ or "")


class PythonRule(Rule):
    """A rule over Python source: `check` is called for every node of a type in `node_types`."""

    node_types: ClassVar[tuple[type[ast.AST], ...]] = ()

    def check(self, node: ast.AST, context: "PythonContext") -> None:
        """Report findings for `node` through `context.report`."""
        raise NotImplementedError

    def transform(self, node: Any, finding: Finding) -> Any:
        """Rewrite the libcst node at the finding's span. Override for `Fix.edit` fixes."""
        raise NotImplementedError(f"{self.code} has no edit named {finding.fix and finding.fix.edit!r}")


@dataclass
class TextContext:
    """What a text rule sees: the path, its decoded text and its kind."""

    path: str
    text: str
    kind: str
    findings: list[Finding] = field(default_factory=list)


class TextRule(Rule):
    """A rule over a non-Python file (CUDA sources, requirements, shell scripts, configs).

    `file_kinds` says which kinds of file it reads (see torchport.scan.files.file_kind).
    `line_pattern`, when set, reports every line it matches; override `check_text` otherwise.
    """

    file_kinds: ClassVar[tuple[str, ...]] = ()
    line_pattern: ClassVar[re.Pattern[str] | None] = None
    #: Whether lines starting with '#' are skipped (comments in shell, YAML, requirements).
    skip_comments: ClassVar[bool] = True

    def check_text(self, context: TextContext) -> Iterator[Finding]:
        """Yield findings for the whole file."""
        if self.line_pattern is None:
            return
        for number, line in enumerate(context.text.splitlines(), start=1):
            if self.skip_comments and line.lstrip().startswith("#"):
                continue
            match = self.line_pattern.search(line)
            if match:
                yield Finding(
                    self.code,
                    context.path,
                    number,
                    match.start(),
                    number,
                    match.end(),
                    self.message,
                    source_line=line.strip(),
                )
