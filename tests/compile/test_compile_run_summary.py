"""The run summary's compile block (torchport run --compile): what it says, and that names and
messages from the application print as one inert line."""

import json

from torchport.compile.report import HOST, CompileReport
from torchport.retarget.report import Recorder


def _report(**fields) -> CompileReport:
    report = CompileReport(target="cpu", compiler="inductor")
    for name, value in fields.items():
        setattr(report, name, value)
    return report


def test_summary_lists_compilations_hits_fallbacks_time_and_what_was_not_compiled():
    trained = _report(calls=12, compilations=2, compile_seconds=9.44, bucket_hits=9, padded_calls=3, eager_calls=1)
    trained.place("aten::nonzero", HOST, "unsupported on neuron: data-dependent shape")
    trained.bucketing["1"] = {"buckets": "powers of two", "padded": False, "reason": "padding changed output 0"}
    broken = _report(calls=2, eager_calls=2, failure="compilation failed (Unsupported: generator)")
    recorder = Recorder(compiled_models=[("GPT", trained), ("Decoder", broken)])
    summary = recorder.summary()
    assert "compile: 2 model(s), 2 compilation(s) in 9.4 s, 9 bucket hit(s), 1 op(s) on the host, " \
           "1 model(s) not compiled" in summary
    assert "GPT: 2 compilation(s) with inductor for cpu in 9.4 s over 12 call(s); 9 bucket hit(s), 3 padded" in summary
    assert "on the host: aten::nonzero (unsupported on neuron: data-dependent shape)" in summary
    assert "dimension 1 not padded: padding changed output 0" in summary
    assert "Decoder: 0 compilation(s)" in summary
    assert "not compiled, runs eagerly: compilation failed (Unsupported: generator)" in summary
    data = json.loads(json.dumps(recorder.to_dict()))
    assert [entry["model"] for entry in data["compile"]] == ["GPT", "Decoder"]
    assert data["compile"][1]["not_compiled"] == "compilation failed (Unsupported: generator)"
    assert data["compile"][0]["not_compiled"] is None


def test_summary_says_when_nothing_was_compiled_and_has_no_block_without_compile():
    assert "nothing compiled" in Recorder(compiled_models=[]).summary()
    assert Recorder(compiled_models=[]).to_dict()["compile"] == []
    plain = Recorder()
    assert "compile" not in plain.summary() and "compile" not in plain.to_dict()


def test_control_characters_from_the_application_are_escaped():
    hostile = _report(failure="compilation failed (\x1b[2Jboom\nsecond line)")
    recorder = Recorder(compiled_models=[("Evil\x1b[31m", hostile)])
    recorder.decide("autocast\x07", "off\r")
    summary = recorder.summary()
    assert "\x1b" not in summary and "\x07" not in summary and "\r" not in summary
    assert "Evil\\x1b[31m" in summary and "boom\\nsecond line" in summary
    assert all(line.startswith(("torchport:", "  ")) for line in summary.splitlines())
