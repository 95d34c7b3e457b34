"""One precision vocabulary for run, check and compare: a word means one thing everywhere, and an
old spelling still works with a deprecation message that names its replacement."""

import warnings

import pytest

from torchport import precision
from torchport.compare.devices import DeviceSpec, parse_device
from torchport.errors import UsageError


def test_every_supported_word_has_one_meaning_and_commands_agree_with_their_runtimes():
    from torchport.retarget import state

    for command, words in precision.SUPPORTED.items():
        assert set(words) <= set(precision.POLICIES), command
    # a synonym never names a policy of its own, and a deprecated spelling is not a synonym
    assert not set(precision.SYNONYMS) & set(precision.POLICIES)
    assert not set(precision.DEPRECATED) & set(precision.SYNONYMS)
    assert tuple(state.PRECISION_POLICIES) == precision.SUPPORTED["run"]


def test_compare_reads_the_shared_words():
    assert parse_device("cpu") == parse_device("cpu:keep") == DeviceSpec("cpu", "keep")
    assert parse_device("host:bfloat16") == DeviceSpec("cpu", "bf16")
    assert parse_device("cpu", precision="no-fp64") == DeviceSpec("cpu", "no-fp64")


def test_compare_fp32_is_deprecated_and_names_its_replacement():
    with pytest.warns(FutureWarning, match=r"'fp32' is deprecated; use 'no-fp64'") as caught:
        assert parse_device("cpu:fp32") == DeviceSpec("cpu", "no-fp64")
    assert "autocast off" in str(caught[0].message)  # what fp32 means everywhere else


def test_run_fp32_is_the_shared_meaning_and_not_deprecated():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert precision.resolve("fp32", "run") == "fp32"
    assert "autocast off" in precision.POLICIES["fp32"]


def test_a_policy_of_another_command_says_where_it_belongs():
    with pytest.raises(UsageError) as info:
        parse_device("cpu:auto")
    message = str(info.value)
    assert "'auto' is a policy of run, not of compare" in message and "no-fp64" in message
    assert "fp32" not in message.split("Allowed:")[1].split(".")[0]  # deprecated spellings not advertised


def test_run_help_lists_the_meanings(capsys):
    from torchport.cli.main import main

    with pytest.raises(SystemExit):
        main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "fp32: autocast off" in out and "keep: run the dtypes the code asks for" in out
