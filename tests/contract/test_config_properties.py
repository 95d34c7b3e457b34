"""Property tests: whatever a user writes in [tool.torchport], a baseline or the scan cache, torchport
either accepts a value it can use or says which file, key and value are wrong (UsageError); it never
fails with an internal error and never accepts a value it cannot use."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torchport.errors import UsageError
from torchport.scan.config import ALLOWED_KEYS, load_config

pytestmark = pytest.mark.filterwarnings("ignore")
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# TOML values: scalars (with nan, inf, booleans), lists and tables of them.
SCALARS = st.one_of(
    st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                        st.dictionaries(st.text("abc", min_size=1, max_size=3), inner,
                                                                        max_size=2)), max_leaves=6)


def _toml_string(text: str) -> str:
    """A TOML basic string: backslash, quote and control characters escaped."""
    return '"' + "".join(f"\\u{ord(char):04x}" if char in '"\\' or ord(char) < 32 or ord(char) == 127 else char
                         for char in text) + '"'


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    return "{" + ", ".join(f"{_toml_string(key)} = {_toml_value(item)}" for key, item in value.items()) + "}"


@SETTINGS
@given(key=st.one_of(st.sampled_from(sorted(ALLOWED_KEYS)), st.text("abcdefghijklmnopqrstuvwxyz-", min_size=1,
                                                                    max_size=14)),
       value=VALUES)
def test_any_pyproject_value_is_usable_or_a_usage_error_naming_file_and_key(key, value, tmp_path):
    path = tmp_path / "pyproject.toml"
    path.write_text(f"[tool.torchport]\n{_toml_string(key)} = {_toml_value(value)}\n", encoding="utf-8")
    try:
        config = load_config(str(path), str(tmp_path))
    except UsageError as error:
        assert str(path) in str(error) and key in str(error)
        return
    assert key in ALLOWED_KEYS
    for listed in (config.select, config.ignore, config.exclude):
        assert all(isinstance(item, str) for item in listed)
    assert config.target is None or isinstance(config.target, str)
    size = config.max_file_size_mb
    assert size is None or (math.isfinite(size) and size > 0 and int(size * 1e6) >= 0)


JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=False),
                              st.text(max_size=5)),
                    lambda inner: st.one_of(st.lists(inner, max_size=3),
                                            st.dictionaries(st.sampled_from(
                                                ["kind", "parity", "nodes", "name", "passed", "training",
                                                 "performance", "reference", "target", "batches", "batch_size",
                                                 "units_per_second", "peak_memory_bytes", "cost", "ratio"]),
                                                inner, max_size=4)), max_leaves=12)


@SETTINGS
@given(document=st.dictionaries(st.sampled_from(["parity", "training", "performance", "cost"]), JSON, max_size=4))
def test_any_baseline_shape_is_judged_or_a_usage_error(document, tmp_path):
    from torchport.cli.compare import _check_baseline_shape
    from torchport.compare.baseline import find_regressions, load_baseline

    path = tmp_path / "old.json"
    path.write_text(json.dumps({"kind": "torchport.compare", **document}))
    try:
        old = load_baseline(path)
        _check_baseline_shape(old, str(path))
    except UsageError as error:
        assert str(path) in str(error)
        return
    new = json.loads(json.dumps(old))  # the same document as the new result: nothing regressed
    assert find_regressions(new, old, tolerance=0.1) == []


ENTRY = st.one_of(JSON, st.fixed_dictionaries({"e": st.one_of(st.none(), st.text(max_size=4)),
                                               "n": st.integers(0, 9),
                                               "f": st.lists(st.dictionaries(st.sampled_from(
                                                   ["code", "line", "column", "end_line", "end_column", "message",
                                                    "source_line", "fix"]),
                                                   st.one_of(st.integers(0, 3), st.text(max_size=4),
                                                             st.just("TP102")), max_size=8), max_size=2)}))


@SETTINGS
@given(entry=ENTRY)
def test_any_cache_entry_of_another_shape_is_read_as_absent(entry, tmp_path):
    from torchport.scan.runner import _valid_entry, scan_paths

    source = tmp_path / "a.py"
    source.write_text("import torch\nmodel = torch.nn.Linear(2, 2).cuda()\n")
    cache = tmp_path / "cache"
    fresh = scan_paths([str(source)], use_cache=False, progress=False)
    scan_paths([str(source)], cache_dir=cache, progress=False)
    for file in cache.glob("scan-*.json"):
        file.write_text(json.dumps({key: entry for key in json.loads(file.read_text())}))
    cached = scan_paths([str(source)], cache_dir=cache, progress=False)  # never an internal error
    if not _valid_entry(entry):  # a well-formed entry is trusted: the cache is keyed by content hash
        assert cached.findings == fresh.findings and cached.not_parsed == fresh.not_parsed
