"""`[tool.torchport]` in pyproject.toml: defaults that command-line flags override."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from torchport.errors import UsageError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

__all__ = ["ScanConfig", "load_config", "find_pyproject", "ALLOWED_KEYS"]

#: Keys accepted in [tool.torchport], with what each holds.
ALLOWED_KEYS = {
    "select": "list of rule codes or prefixes to run",
    "ignore": "list of rule codes or prefixes to skip",
    "target": "a target name or alias (the backends 'torchport doctor' lists, but cuda) or any",
    "exclude": "list of glob patterns of paths not to scan",
    "max-file-size": "largest source file to parse, in MB",
}


@dataclass
class ScanConfig:
    """Settings read from [tool.torchport]; empty when there is none."""

    select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    target: str | None = None
    exclude: list[str] = field(default_factory=list)
    max_file_size_mb: float | None = None
    source: str | None = None


def find_pyproject(start: str) -> Path | None:
    """The nearest pyproject.toml with a [tool.torchport] table, from `start` upwards."""
    directory = Path(start).resolve()
    if directory.is_file():
        directory = directory.parent
    for candidate in (directory, *directory.parents):
        path = candidate / "pyproject.toml"
        if path.is_file():
            try:
                data = _parse(path)
            except OSError:
                continue  # unreadable: as if absent
            if "torchport" in data.get("tool", {}):
                return path
    return None


def _parse(path: Path) -> dict:
    """The TOML in `path`; a syntax or encoding error is a usage error naming the file (OSError passes)."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise UsageError(
            f"Cannot parse {str(path)!r}: {error}. Fix the TOML syntax there, "
            "or pass --config with the path of a valid pyproject.toml."
        ) from error


#: An example value per list key, for error messages: exclude holds path globs, not rule codes.
_EXAMPLES = {"select": '["TP1"]', "ignore": '["TP501"]', "exclude": '["build/*", "*_pb2.py"]'}
#: The largest max-file-size accepted, in MB (a larger file is not source code).
MAX_FILE_SIZE_LIMIT_MB = 10_000


def _string_list(value, key: str, path: Path) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return list(value)
    raise UsageError(
        f"[tool.torchport] {key} in {path} is {value!r}; it must be a list of strings "
        f"({ALLOWED_KEYS[key]}). Example: {key} = {_EXAMPLES[key]}"
    )


def _file_size(value, path: Path) -> float:
    """max-file-size: a number of MB, more than 0 and at most MAX_FILE_SIZE_LIMIT_MB (not a bool, nan or inf)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_FILE_SIZE_LIMIT_MB:
        raise UsageError(
            f"[tool.torchport] max-file-size in {path} is {value!r}; give a number of MB greater than 0 and "
            f"at most {MAX_FILE_SIZE_LIMIT_MB}. Example: max-file-size = 5"
        )
    return float(value)


def load_config(explicit: str | None, start: str) -> ScanConfig:
    """Read `explicit` (a pyproject.toml) or the nearest one above `start`."""
    if explicit:
        path = Path(explicit)
        if path.is_dir():
            raise UsageError(
                f"Config file {explicit!r} is a folder. Pass the path of a pyproject.toml, "
                f"e.g. --config {os.path.join(explicit, 'pyproject.toml')}."
            )
        if not path.is_file():
            raise UsageError(f"Config file {explicit!r} does not exist. Pass the path of a pyproject.toml.")
    else:
        found = find_pyproject(start if os.path.exists(start) else ".")
        if found is None:
            return ScanConfig()
        path = found
    try:
        data = _parse(path)
    except OSError as error:
        raise UsageError(f"Cannot read config file {str(path)!r}: {error.strerror}. Check its permissions.") from error
    table = data.get("tool", {}).get("torchport", {})
    unknown = sorted(set(table) - set(ALLOWED_KEYS))
    if unknown:
        import difflib

        allowed = ", ".join(f"{key} ({meaning})" for key, meaning in ALLOWED_KEYS.items())
        hints = [f"{key!r} -> {close[0]!r}" for key in unknown
                 for close in [difflib.get_close_matches(str(key), ALLOWED_KEYS, n=1)] if close]
        hint = f" Did you mean: {', '.join(hints)}?" if hints else ""
        raise UsageError(f"Unknown key(s) {unknown} in [tool.torchport] of {path}.{hint} Allowed: {allowed}.")
    config = ScanConfig(source=str(path))
    config.select = _string_list(table.get("select", []), "select", path)
    config.ignore = _string_list(table.get("ignore", []), "ignore", path)
    config.exclude = _string_list(table.get("exclude", []), "exclude", path)
    if "target" in table:
        if not isinstance(table["target"], str):
            raise UsageError(
                f"[tool.torchport] target in {path} is {table['target']!r}; it must be a string: "
                f"{ALLOWED_KEYS['target']}. Example: target = \"neuron\""
            )
        config.target = table["target"]
    if "max-file-size" in table:
        config.max_file_size_mb = _file_size(table["max-file-size"], path)
    return config
