"""`torchport fix` rewrites files in one step: the mode is kept and a failed write leaves the file intact."""

from __future__ import annotations

import os
import stat

from torchport.cli.main import main

SOURCE = "import torch\ntorch.cuda.synchronize()\n"


def test_fix_keeps_the_file_mode_and_leaves_no_temporary_file(tmp_path):
    program = tmp_path / "train.py"
    program.write_text(SOURCE)
    program.chmod(0o750)
    assert main(["fix", str(program), "--exit-zero"]) == 0
    assert "torch.cuda.synchronize" not in program.read_text()
    assert stat.S_IMODE(program.stat().st_mode) == 0o750
    assert os.listdir(tmp_path) == ["train.py"]


def test_fix_through_a_symlink_rewrites_the_target(tmp_path):
    program = tmp_path / "real.py"
    program.write_text(SOURCE)
    link = tmp_path / "link.py"
    link.symlink_to(program)
    assert main(["fix", str(link), "--exit-zero"]) == 0
    assert link.is_symlink()
    assert "torch.cuda.synchronize" not in program.read_text()


def test_a_failed_write_leaves_the_original_intact(tmp_path, monkeypatch, capsys):
    program = tmp_path / "train.py"
    program.write_text(SOURCE)

    def disk_full(descriptor):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    assert main(["fix", str(program)]) == 2
    assert program.read_text() == SOURCE
    assert os.listdir(tmp_path) == ["train.py"]
    assert "No space left on device" in capsys.readouterr().err


def test_an_interrupt_during_the_write_leaves_the_original_intact(tmp_path, monkeypatch):
    program = tmp_path / "train.py"
    program.write_text(SOURCE)

    def interrupted(source, destination):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    assert main(["fix", str(program)]) != 0
    assert program.read_text() == SOURCE
    assert os.listdir(tmp_path) == ["train.py"]
