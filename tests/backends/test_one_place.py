"""One place per device: a backend is one Python file and one profile, and everything else derives.

Capability facts are profile data read by the one Backend base; an '-emulated' twin makes its real
backend's decisions; rule severities follow profile facts; targets come from the registry; profile
validation is the same with or without jsonschema; a third-party backend shipped as one .py and one
.yaml gets doctor, run, check, scan and compare without touching torchport.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from torchport import backends, profiles
from torchport.backends.emulated import EMULATOR_LIMITS
from torchport.errors import ProfileError
from torchport.profiles.schema import CAPABILITIES, CAPABILITY_DEFAULTS
from torchport.rules.base import DependsOn, Severity, targets
from torchport.rules.registry import all_rules

SOURCE = Path(backends.__file__).resolve().parents[1]

#: Backend property -> the profile capability it reads.
PROPERTIES = {
    "supports_grad_scaler": "grad_scaler",
    "supports_pinned_memory": "pinned_memory",
    "native_events": "native_events",
    "native_streams": "native_streams",
    "loads_to_device": "loads_to_device",
    "supports_fused_optimizers": "fused_optimizers",
    "supports_sync_batchnorm": "sync_batchnorm",
    "supports_capturable_optimizers": "capturable_optimizers",
    "compiler": "compiler",
}


def _real_backends_with_profiles():
    return [backend for backend in backends.real_backends() if backend.name in profiles.names()]


def test_a_builtin_backend_is_one_file_and_one_profile():
    files = {path.stem for path in (SOURCE / "backends").glob("*.py")} - {"__init__", "base", "emulated"}
    assert files == set(profiles.names())
    for name in files:
        backend = backends.get(name)
        assert type(backend).__module__ == f"torchport.backends.{name}" and backend.name == name
        assert profiles.load(name).device_type == backend.device_type
        assert backends.get(f"{name}-emulated").profile() == profiles.load(name)


@pytest.mark.parametrize("backend", _real_backends_with_profiles(), ids=lambda backend: backend.name)
def test_capability_properties_read_the_profile_and_the_twin_makes_the_same_decisions(backend):
    profile = profiles.load(backend.name)
    twin = backends.get(backends.emulated_name(backend.name))
    assert set(profile.capabilities) == {*CAPABILITIES, *CAPABILITY_DEFAULTS, "compiler"}
    for prop, capability in PROPERTIES.items():
        assert getattr(backend, prop) == profile.capabilities[capability], (backend.name, prop)
        # The twin decides as the real target does, except where the emulator itself cannot follow.
        expected = EMULATOR_LIMITS.get(capability, profile.capabilities[capability])
        assert getattr(twin, prop) == expected, (twin.name, prop)
    assert twin.preferred_precision == backend.preferred_precision
    assert backend.dist_backend == profile.collective_backends[0]


def test_neuron_emulated_turns_the_grad_scaler_off_like_neuron():
    assert backends.get("neuron").supports_grad_scaler is False
    assert backends.get("neuron-emulated").supports_grad_scaler is False
    assert backends.get("cuda-emulated").supports_grad_scaler is True


def test_fused_optimizers_and_compiler_are_profile_facts_with_sources():
    assert backends.get("cpu").supports_fused_optimizers and backends.get("cuda").supports_fused_optimizers
    assert not backends.get("xla").supports_fused_optimizers and not backends.get("neuron").supports_fused_optimizers
    assert {name: backends.get(name).compiler for name in ("cpu", "cuda", "xpu", "mps", "xla", "neuron")} == {
        "cpu": "inductor", "cuda": "inductor", "xpu": "inductor", "mps": "inductor", "xla": "openxla",
        "neuron": "neuron",
    }
    for name in profiles.names():
        sources = profiles.load(name).data["capabilities"].get("sources", {})
        assert "fused_optimizers" in sources and "compiler" in sources, name


@pytest.mark.parametrize("flags, expected", [({"amx_bf16", "avx2"}, "bfloat16"), ({"avx2"}, "float32")])
def test_cpu_precision_is_the_profile_rule_evaluated_on_the_host_flags(monkeypatch, flags, expected):
    from torchport.backends import cpu

    rule = profiles.load("cpu").data["preferred_precision_requires"]
    assert "amx_bf16" in rule["host_cpu_flags_any"] and rule["otherwise"] == "float32"
    monkeypatch.setattr(cpu, "cpu_flags", lambda: frozenset(flags))
    assert backends.get("cpu").preferred_precision == expected
    assert backends.get("cpu-emulated").preferred_precision == expected
    assert cpu.has_native_bf16() is (expected == "bfloat16")


# -- profile validation ------------------------------------------------------------------------


def _user_profile(tmp_path, text: str) -> Path:
    path = tmp_path / "mine.yaml"
    path.write_text("extends: neuron\nname: mine\nemulated_name: mine-emulated\n" + text)
    return path


@pytest.mark.parametrize(
    "text, words",
    [
        ("memory_bytes: lots\n", ["memory_bytes", "'lots'", "whole number"]),
        ("memory_bytes: -5\n", ["memory_bytes", "-5", "at least 1"]),
        ("memroy_bytes: 5\n", ["memroy_bytes", "did you mean 'memory_bytes'"]),
        ("capabilities:\n  grad_scalar: true\n", ["capabilities.grad_scalar", "did you mean 'grad_scaler'"]),
        ("capabilities:\n  compiler: 3\n", ["capabilities.compiler", "3", "string"]),
        ("shapes:\n  dynamic: sometimes\n", ["shapes.dynamic", "'sometimes'", "recompiles"]),
        ("preferred_precision: fp8\n", ["preferred_precision", "'fp8'", "bfloat16"]),
    ],
)
def test_a_bad_profile_value_names_file_key_value_and_what_is_allowed(tmp_path, monkeypatch, text, words):
    path = _user_profile(tmp_path, text)
    errors = []
    # The same error with and without jsonschema installed: the loader never uses it.
    for jsonschema_missing in (False, True):
        if jsonschema_missing:
            monkeypatch.setitem(sys.modules, "jsonschema", None)
        with pytest.raises(ProfileError) as info:
            profiles.load(path)
        errors.append(str(info.value))
    assert errors[0] == errors[1]
    assert str(path) in errors[0] and all(word in errors[0] for word in words), errors[0]
    assert "Traceback" not in errors[0]


def test_a_profile_without_required_keys_names_them_and_the_way_out(tmp_path):
    document = yaml.safe_load((profiles.PROFILE_DIRECTORY / "xpu.yaml").read_text())
    del document["capabilities"]
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(ProfileError) as info:
        profiles.load(path)
    assert str(path) in str(info.value) and "lacks the required key(s) capabilities" in str(info.value)
    assert "extends: <target>" in str(info.value)


def test_a_missing_profile_file_is_named_as_a_missing_file_not_an_unknown_target(tmp_path):
    with pytest.raises(ProfileError, match=r"Profile file '.*gone.yaml' does not exist") as info:
        profiles.load(tmp_path / "gone.yaml")
    assert "Unknown target" not in str(info.value)
    with pytest.raises(ProfileError, match="is a folder"):
        profiles.load(str(tmp_path) + os.sep)


def test_the_validator_agrees_with_jsonschema():
    jsonschema = pytest.importorskip("jsonschema")
    valid = [yaml.safe_load((profiles.PROFILE_DIRECTORY / f"{name}.yaml").read_text()) for name in profiles.names()]
    broken = []
    for document in valid[:2]:
        for key, value in [("memory_bytes", "lots"), ("memory_bytes", 0), ("memory_bytes", True), ("name", "Neuron"),
                           ("collective_backends", []), ("extra_key", 1), ("sources", {})]:
            broken.append({**document, key: value})
        broken.append({key: value for key, value in document.items() if key != "capabilities"})
        broken.append({**document, "capabilities": {**document["capabilities"], "grad_scaler": "yes"}})
    for document in valid + broken:
        try:
            jsonschema.validate(document, profiles.PROFILE_SCHEMA)
            expected = True
        except jsonschema.ValidationError:
            expected = False
        try:
            profiles.schema.validate(document)
            got = True
        except profiles.schema.SchemaViolation:
            got = False
        assert got == expected, document
    assert len(broken) == 18


# -- rule severities and targets ---------------------------------------------------------------


def test_targets_and_scan_choices_come_from_the_registry():
    from torchport.cli import check, scan

    expected = tuple(backend.name for backend in backends.real_backends() if backend.name != "cuda")
    assert targets() == expected and expected[-1] == "cpu"
    assert scan.TARGET_CHOICES == (*expected, "any")
    assert check.DEFAULT_TARGET == expected[0]


@pytest.mark.parametrize("rule", all_rules(), ids=lambda rule: rule.code)
def test_every_rule_severity_follows_a_profile_fact_not_a_target_table(rule):
    table = rule.target_severity
    if not isinstance(table, DependsOn):
        assert table == {}, f"{rule.code} names targets in target_severity; state the profile fact instead"
        assert {rule.severity_for(target) for target in targets()} == {rule.severity}
        return
    assert table.fact in profiles.FACTS, f"{rule.code}: unknown fact {table.fact!r}"
    for target in targets():
        value = profiles.load(target).fact(table.fact)
        assert rule.severity_for(target) == table.severities.get(value, rule.severity), (rule.code, target)


def test_a_severity_changes_when_the_profile_fact_changes(tmp_path, monkeypatch):
    from torchport.rules import base
    from torchport.rules.registry import get_rule

    float64 = get_rule("TP401")
    assert float64.severity_for("mps") is Severity.ERROR  # refused
    assert float64.severity_for("cpu") is Severity.OFF  # native
    # A user's profile folder overrides mps: float64 native there, so the rule is off.
    document = yaml.safe_load((profiles.PROFILE_DIRECTORY / "mps.yaml").read_text())
    document["dtypes"]["float64"] = {"status": "native"}
    (tmp_path / "mps.yaml").write_text(yaml.safe_dump(document))
    monkeypatch.setenv("TORCHPORT_PROFILE_PATH", str(tmp_path))
    monkeypatch.setattr(base, "_fact_cache", {})
    assert float64.severity_for("mps") is Severity.OFF


# -- doctor and prices -------------------------------------------------------------------------


def test_doctor_flags_a_device_variable_that_names_no_backend(monkeypatch, capsys):
    from torchport.cli.main import main

    monkeypatch.setenv("TORCHPORT_DEVICE", "quantum")
    assert main(["doctor", "--output-format", "json"]) == 1
    facts = json.loads(capsys.readouterr().out)
    assert any("TORCHPORT_DEVICE='quantum'" in problem and "neuron" in problem for problem in facts["problems"])
    neuron = next(row for row in facts["backends"] if row["name"] == "neuron-emulated")
    assert neuron["supports_grad_scaler"] is False and neuron["compiler"] == "neuron"
    monkeypatch.setenv("TORCHPORT_DEVICE", "trainium-emulated")
    assert main(["doctor", "--output-format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["problems"] == []


def test_price_devices_are_checked_against_the_registry(tmp_path):
    from torchport.compare.cost import load_prices
    from torchport.errors import UsageError

    table = load_prices()
    assert table.instance_for("neuron-emulated") == table.instance_for("neuron") is not None
    assert all(name in [backend.name for backend in backends.all_backends()] for name in table.devices)
    path = tmp_path / "prices.yaml"
    path.write_text("instances: {a: {price_per_hour: 1}}\ndevices: {nueron: a}\n")
    with pytest.raises(UsageError, match=r"'nueron'.*not a torchport backend. Did you mean 'neuron'"):
        load_prices(path)
    path.write_text("instances: {a: {price_per_hour: 1}}\ndevices: {trainium: a}\n")
    assert load_prices(path).instance_for("neuron-emulated") == ("a", 1.0)
    path.write_text("instances: {a: {price_per_hour: 1}}\ndevices: {}\ncurrancy: EUR\n")
    with pytest.raises(UsageError, match=r"unknown key 'currancy'. Did you mean 'currency'"):
        load_prices(path)


# -- a third-party backend: one .py, one .yaml, an entry point ---------------------------------

HPU_BACKEND = '''\
"""Intel Gaudi for torchport: one backend file, with its profile (hpu.yaml) next to it."""

from torchport.backends import register
from torchport.backends.base import Backend, Probe, package_installed


@register
class HPUBackend(Backend):
    name = "hpu"
    aliases = ("gaudi",)
    description = "Intel Gaudi HPUs through habana_frameworks"

    def probe(self) -> Probe:
        if not package_installed("habana_frameworks"):
            return Probe(False, "habana_frameworks is not installed", "Install the Intel Gaudi software stack.")
        return Probe(True, "habana_frameworks installed")
'''

HPU_PROFILE = '''\
name: hpu
title: Intel Gaudi (HPU)
device_type: hpu
package: habana_frameworks
emulated_name: hpu-emulated
preferred_precision: bfloat16
collective_backends: [hccl]
memory_bytes: 103079215104
sources: {targets: "a test profile"}
dtypes:
  float32: {status: native}
  bfloat16: {status: native}
  float64: {status: refused}
ops:
  aten::nonzero: {status: unsupported, reason: "data-dependent shape", source: "a test profile"}
shapes: {static: true, dynamic: recompiles, source: "a test profile",
         compile_seconds_per_graph: 5.0, compile_seconds_per_op_signature: 0.1}
fallback: {mechanism: "none"}
capabilities: {grad_scaler: false, pinned_memory: true, native_events: true, native_streams: true,
               loads_to_device: true, fused_optimizers: true, compiler: hpu_backend}
'''

APP = '''\
import torch
x = torch.ones(4, device="cuda")
scaler = torch.amp.GradScaler("cuda")
print("device", x.device.__str__().split(":")[0], "sum", float((x * 2).sum()), "scaler", scaler.is_enabled())
'''

HAZARDS = "import torch\nx = torch.zeros(3, dtype=torch.float64)\nindex = torch.nonzero(x)\n"

CASE = '''\
import torch


def make():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)), (torch.randn(4, 8),)
'''


@pytest.fixture(scope="module")
def hpu_install(tmp_path_factory):
    """A throwaway install: the package and its dist-info (with the entry point) in a site folder."""
    root = tmp_path_factory.mktemp("hpu")
    site = root / "site"
    (site / "torchport_hpu").mkdir(parents=True)
    (site / "torchport_hpu" / "__init__.py").write_text(HPU_BACKEND)
    (site / "torchport_hpu" / "hpu.yaml").write_text(HPU_PROFILE)
    info = site / "torchport_hpu-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torchport-hpu\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[torchport.backends]\nhpu = torchport_hpu\n")
    work = root / "work"
    work.mkdir()
    (work / "app.py").write_text(APP)
    (work / "hazards.py").write_text(HAZARDS)
    (work / "hpu_case.py").write_text(CASE)
    (work / "prices.yaml").write_text(
        "instances: {gaudi2: {price_per_hour: 2.0}, host: {price_per_hour: 0.5}}\ndevices: {gaudi: gaudi2, cpu: host}\n"
    )
    return site, work


def _torchport(hpu_install, *arguments):
    site, work = hpu_install
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(work)]), "TORCHPORT_QUIET": "1",
                   "COLUMNS": "200"}
    environment.pop("TORCHPORT_DEVICE", None)
    return subprocess.run([sys.executable, "-m", "torchport", *arguments], cwd=work, env=environment,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_a_third_party_backend_gets_every_subcommand_without_touching_torchport(hpu_install):
    site, work = hpu_install
    doctor = _torchport(hpu_install, "doctor", "--output-format", "json")
    assert doctor.returncode == 0, doctor.stderr
    rows = {row["name"]: row for row in json.loads(doctor.stdout)["backends"]}
    assert rows["hpu"]["usable"] is False and "habana_frameworks" in rows["hpu"]["reason"]
    assert rows["hpu"]["compiler"] == "hpu_backend" and rows["hpu"]["dist_backend"] == "hccl"
    assert rows["hpu-emulated"]["usable"] and rows["hpu-emulated"]["aliases"] == ["gaudi-emulated"]
    assert rows["hpu-emulated"]["supports_grad_scaler"] is False  # the twin reads hpu.yaml

    run = _torchport(hpu_install, "run", "--device", "hpu-emulated", "--precision", "keep", "--report", "run.json",
                     "app.py")
    assert run.returncode == 0, run.stderr
    assert "device emulated sum 8.0 scaler True" in run.stdout
    decisions = {entry["topic"]: entry["decision"] for entry in json.loads((work / "run.json").read_text())["decisions"]}
    assert "no GradScaler kernels" in decisions["GradScaler"]  # the GradScaler fact of hpu.yaml

    check = _torchport(hpu_install, "check", "--target", "gaudi", "--output-format", "json", "--output", "check.json",
                       "app.py")
    assert check.returncode == 0, check.stderr
    report = json.loads((work / "check.json").read_text())
    assert report["target"]["name"] == "hpu" and report["target"]["profile"].endswith("hpu.yaml")

    scan = _torchport(hpu_install, "scan", "--target", "hpu", "--output-format", "json", "hazards.py")
    assert scan.returncode == 1, scan.stderr
    document = json.loads(scan.stdout)
    assert document["target"] == "hpu"
    assert {item["code"]: item["severity"] for item in document["findings"]} == {"TP401": "error", "TP403": "error"}
    text = _torchport(hpu_install, "scan", "hazards.py").stdout
    assert re.search(r"^\s+hpu\s+blocked\s+\(2 errors", text, re.MULTILINE), text

    compare = _torchport(hpu_install, "compare", "hpu_case:make", "--reference", "cpu", "--target", "hpu-emulated",
                         "--no-parity", "--no-training", "--batch-sizes", "1", "--iterations", "2", "--warmup", "1",
                         "--prices", "prices.yaml", "--output-format", "json", "--json", "compare.json")
    assert compare.returncode in (0, 1), compare.stderr
    result = json.loads((work / "compare.json").read_text())
    assert result["target"] == "hpu-emulated" and result["cost"]["target_instance"] == "gaudi2"


# -- no target named outside backends/, profiles/ and emulated/ --------------------------------

#: Where a target's name may appear in code: the backends, their profiles and the emulator.
_HOMES = ("backends", "profiles", "emulated")
#: Aliases that are also ordinary words in code ('inf' is float('inf') far more often than Inferentia).
_COMMON_WORDS = {"inf", "host"}
#: Files that still name targets, and which names. Each entry is a known offender left for its owner;
#: the test fails on any file or name not listed here.
_ALLOWED = {
    # rules whose subject is user code that names a device (the chains and probes they look for)
    "rules/device/device_autodetect_chain.py": {"mps", "xpu"},
    "rules/device/cuda_is_available.py": {"mps"},
    "fix/neutral.py": {"mps"},  # writes the legacy cuda/mps/cpu chain for torch older than 2.6
    # a message text; the severity itself follows the 'dynamic shapes' fact
    "rules/runtime/torch_compile.py": {"neuron"},
    # help examples inside error messages
    "scan/config.py": {"neuron"},
    "compile/backend.py": {"neuron"},  # a help example in a docstring-like error message
    "retarget/amp.py": {"xla"},  # torch's own warning text, repeated word for word ("or torch_xla is imported")
}


def _target_words() -> re.Pattern:
    words = set()
    for backend in backends.real_backends():
        if backend.name not in ("cuda", "cpu"):
            words.update({backend.name, *backend.aliases})
    words -= _COMMON_WORDS
    alternatives = "|".join(sorted(map(re.escape, words), key=len, reverse=True))
    return re.compile(rf"(?<![A-Za-z0-9])({alternatives})(?![A-Za-z0-9])", re.IGNORECASE)


def _exempt_nodes(tree: ast.AST) -> set[int]:
    """Docstrings, help texts and rule examples (user code) are not code that names a target."""
    exempt = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                exempt.add(id(first.value))
        value = None
        if isinstance(node, ast.keyword) and node.arg in ("help", "description", "epilog"):
            value = node.value
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id in ("HELP", "DESCRIPTION", "VALID", "INVALID")
            for target in node.targets
        ):
            value = node.value
        if value is not None:
            exempt.update(id(child) for child in ast.walk(value))
    return exempt


def _named_targets(path: Path, pattern: re.Pattern) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    exempt = _exempt_nodes(tree)
    found = set()
    for node in ast.walk(tree):
        if id(node) in exempt:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        elif isinstance(node, ast.Attribute):
            text = node.attr
        elif isinstance(node, ast.Name):
            text = node.id
        else:
            continue
        found.update(match.lower() for match in pattern.findall(text))
    return found


def test_no_module_outside_the_device_homes_names_a_target():
    pattern = _target_words()
    assert pattern.search("torch.zeros(2, device='neuron')") and not pattern.search("float('inf')")
    offenders = {}
    for path in sorted(SOURCE.rglob("*.py")):
        relative = path.relative_to(SOURCE).as_posix()
        if relative.split("/", 1)[0] in _HOMES:
            continue
        named = _named_targets(path, pattern) - _ALLOWED.get(relative, set())
        if named:
            offenders[relative] = sorted(named)
    assert not offenders, (
        f"these modules name specific targets: {offenders}. Read the fact from the backend or its profile "
        "(torchport.backends.get(name).<property>, profiles.load(name).fact(...)) instead."
    )
