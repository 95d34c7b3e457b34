"""Profiles: every built-in target loads, satisfies the schema, cites sources, and can be extended."""

import jsonschema
import pytest
import yaml

from torchport import profiles
from torchport.errors import ProfileError


@pytest.mark.parametrize("name", profiles.names())
def test_every_profile_satisfies_the_schema_and_cites_sources(name):
    document = yaml.safe_load((profiles.PROFILE_DIRECTORY / f"{name}.yaml").read_text())
    jsonschema.validate(document, profiles.PROFILE_SCHEMA)
    profile = profiles.load(name)
    assert document["sources"] and all(value.strip() for value in document["sources"].values())
    for rule in profile.ops.values():
        assert rule.source and rule.reason


def test_the_seven_targets_of_the_issue_exist():
    assert {"neuron", "xla", "mps", "xpu", "npu", "cuda", "cpu"} <= set(profiles.names())


def test_neuron_downcasts_fp64_and_int64_and_mps_refuses_fp64():
    neuron = profiles.load("trainium")
    assert neuron.downcasts() == {"float64": "float32", "int64": "int32"}
    assert neuron.static_shapes and neuron.op_rule("aten::nonzero").status == "unsupported"
    assert "float64" in profiles.load("mps").refused()
    assert profiles.load("cuda").downcasts() == {} and not profiles.load("cuda").static_shapes


def test_a_user_profile_extends_a_builtin_one(tmp_path):
    path = tmp_path / "trn1.yaml"
    path.write_text("extends: neuron\nname: trnone\nmemory_bytes: 34359738368\nemulated_name: trnone-emulated\n")
    profile = profiles.load(path)
    assert profile.name == "trnone" and profile.memory_bytes == 32 * 2**30
    assert profile.downcasts()["float64"] == "float32"


def test_unknown_target_names_the_known_ones():
    with pytest.raises(ProfileError) as info:
        profiles.load("tpuu")
    assert "'tpuu'" in str(info.value) and "neuron" in str(info.value)


def test_invalid_profile_says_where(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("extends: neuron\ndtypes:\n  float64: {status: maybe}\n")
    with pytest.raises(ProfileError) as info:
        profiles.load(path)
    assert "float64" in str(info.value) and "maybe" in str(info.value)


def _real_backends_with_profiles():
    from torchport import backends

    return [backend for backend in backends.all_backends() if backend.name in profiles.names()]


def test_every_backend_alias_is_a_check_target_and_an_emulated_alias():
    from torchport import backends

    checked = 0
    for backend in _real_backends_with_profiles():
        emulated = backends.get(f"{backend.name}-emulated")
        assert emulated.aliases == tuple(f"{alias}-emulated" for alias in backend.aliases)
        for alias in backend.aliases:
            assert profiles.load(alias).name == backend.name, alias
            assert profiles.load(f"{alias}-emulated").name == backend.name, alias
            assert profiles.load(alias.upper()).name == backend.name, alias
            assert profiles.aliases()[alias] == backend.name
            checked += 1
    assert checked >= 15 and {"pjrt", "metal", "trainium", "tpu"} <= set(profiles.aliases())


def test_check_cli_accepts_the_run_aliases(tmp_path):
    import json
    import os
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text("import torch\nprint(torch.ones(2, device='cuda').sum().item())\n")
    environment = {key: value for key, value in os.environ.items() if key != "TORCHPORT_TARGET"}
    for alias, name in (("pjrt", "xla"), ("metal", "mps")):
        output = tmp_path / f"{alias}.json"
        result = subprocess.run(
            [sys.executable, "-m", "torchport", "check", "--target", alias, "--output-format", "json",
             "--output", str(output), str(script)],
            capture_output=True, text=True, timeout=120, env=environment,
        )
        assert result.returncode in (0, 1), result.stderr
        assert json.loads(output.read_text())["target"]["name"] == name


def test_an_edited_profile_is_read_again_and_a_damaged_cache_entry_is_parsed_over(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHPORT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr("sys.dont_write_bytecode", False)
    path = tmp_path / "trn1.yaml"
    path.write_text("extends: neuron\nname: trnone\nmemory_bytes: 1024\nemulated_name: trnone-emulated\n")
    assert profiles.load(path).memory_bytes == 1024
    entries = list((tmp_path / "cache" / "profiles").glob("trn1.*"))
    assert len(entries) == 1  # the parsed document is kept
    assert profiles.load(path).memory_bytes == 1024  # read back
    path.write_text("extends: neuron\nname: trnone\nmemory_bytes: 4096\nemulated_name: trnone-emulated\n")
    assert profiles.load(path).memory_bytes == 4096  # the edit is seen at once
    entries[0].write_bytes(b"\x00garbage")
    assert profiles.load(path).memory_bytes == 4096
    path.write_text("extends: neuron\nname: trnone\nmemory_bytes: [\n")
    with pytest.raises(ProfileError, match="Cannot read profile"):
        profiles.load(path)  # a YAML error is still reported, whatever the cache holds
