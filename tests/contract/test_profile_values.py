"""The contract for profile YAML files given to --target: a bad value, an unknown key or a missing
file is one line naming the file, key and value, with or without jsonschema installed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from torchport.cli.main import main
from torchport.profiles import load

BUILT_IN = Path(load("neuron").path)


def _profile(folder: Path, **changes) -> str:
    document = yaml.safe_load(BUILT_IN.read_text())
    document.update(changes)
    path = folder / "mine.yaml"
    path.write_text(yaml.safe_dump(document))
    return str(path)


# changes to the built-in neuron profile -> what the one-line error must name
CASES = {
    "memory-a-word": ({"memory_bytes": "lots"}, ["memory_bytes", "'lots'"]),
    "memory-negative": ({"memory_bytes": -160}, ["memory_bytes", "-160"]),
    "unknown-key": ({"memory_byts": 5}, ["memory_byts", "memory_bytes"]),  # the key, and a suggestion
}


@pytest.mark.parametrize("without_jsonschema", [False, True], ids=["with-jsonschema", "without-jsonschema"])
@pytest.mark.parametrize("name", list(CASES))
def test_bad_profile_is_one_line_naming_file_key_and_value(name, without_jsonschema, tmp_path, capsys, monkeypatch):
    if without_jsonschema:
        monkeypatch.setitem(sys.modules, "jsonschema", None)  # import jsonschema now fails
    changes, fragments = CASES[name]
    profile = _profile(tmp_path, **changes)
    (tmp_path / "train.py").write_text("import torch\n")
    assert main(["check", "--target", profile, str(tmp_path / "train.py")]) == 2
    error = capsys.readouterr().err
    assert "Traceback" not in error and len(error.strip().splitlines()) == 1
    assert "mine.yaml" in error and all(fragment in error for fragment in fragments)


def test_missing_profile_file_is_named_as_a_file_not_an_unknown_target(tmp_path, capsys):
    (tmp_path / "train.py").write_text("import torch\n")
    assert main(["check", "--target", str(tmp_path / "mine.yaml"), str(tmp_path / "train.py")]) == 2
    error = capsys.readouterr().err
    assert "does not exist" in error and "Unknown target" not in error
