"""The exit summary of `torchport run`: what it names and what it says it left out."""

from torchport.retarget.report import Recorder, Site


def test_the_summary_says_how_many_unsupported_sites_it_did_not_name():
    recorder = Recorder()
    for line in range(1, 8):
        recorder.add("unsupported", Site("app.py", line, f"torch.cuda.f{line}"), "Use torch.accelerator")
    summary = recorder.summary().splitlines()
    assert "7 unsupported site(s)" in summary[0]
    named = [line for line in summary if line.startswith("  unsupported: torch.cuda.")]
    assert len(named) == 5
    assert "  unsupported: 2 more site(s), every one in the JSON report (--report FILE)" in summary
