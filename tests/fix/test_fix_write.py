"""`torchport fix` rewrites files in one step: the mode is kept and a failed write leaves the file intact."""

from __future__ import annotations

import os
import stat

import pytest

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


# --- fix writes only what it read (issue 11 item 4) and never calls an unprocessed file clean (item 6)

FIXABLE = "import torch\ntorch.cuda.synchronize()\n"


def _fix(*arguments) -> int:
    return main(["fix", *map(str, arguments)])


def test_an_edit_made_while_fix_runs_is_kept_and_reported(tmp_path, monkeypatch, capsys):
    import torchport.fix.engine as engine

    program = tmp_path / "train.py"
    program.write_text(FIXABLE)
    real_fix_source = engine.fix_source

    def user_saves_meanwhile(*arguments, **keywords):
        result = real_fix_source(*arguments, **keywords)
        program.write_text(FIXABLE + "print('my edit')\n")
        return result

    monkeypatch.setattr(engine, "fix_source", user_saves_meanwhile)
    assert _fix(program) == 1
    assert program.read_text() == FIXABLE + "print('my edit')\n"
    assert "changed while torchport fix ran" in capsys.readouterr().err


def test_bom_and_crlf_line_endings_are_kept(tmp_path):
    program = tmp_path / "train.py"
    program.write_bytes(b"\xef\xbb\xbf" + FIXABLE.replace("\n", "\r\n").encode())
    assert _fix(program, "--exit-zero") == 0
    data = program.read_bytes()
    assert data.startswith(b"\xef\xbb\xbf") and b"torch.cuda.synchronize" not in data
    assert data.count(b"\r\n") == data.count(b"\n") == 2


def test_a_latin1_file_with_a_coding_line_is_fixed_in_latin1(tmp_path):
    program = tmp_path / "train.py"
    program.write_bytes(b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + FIXABLE.encode())
    assert _fix(program, "--exit-zero") == 0
    data = program.read_bytes()
    assert b"# caf\xe9\n" in data and b"torch.cuda.synchronize" not in data


def test_a_read_only_file_is_refused_unless_forced(tmp_path, capsys):
    program = tmp_path / "train.py"
    program.write_text(FIXABLE)
    program.chmod(0o444)
    assert _fix(program) == 1
    assert program.read_text() == FIXABLE
    assert "read-only" in capsys.readouterr().err
    assert _fix(program, "--force", "--exit-zero") == 0
    assert "torch.cuda.synchronize" not in program.read_text()
    assert stat.S_IMODE(program.stat().st_mode) == 0o444


def test_a_hard_linked_file_is_refused_unless_forced_then_written_in_place(tmp_path, capsys):
    program = tmp_path / "train.py"
    program.write_text(FIXABLE)
    other = tmp_path / "other_name.py"
    os.link(program, other)
    assert _fix(program) == 1
    assert program.read_text() == FIXABLE
    assert "hard links" in capsys.readouterr().err
    assert _fix(program, "--force", "--exit-zero") == 0
    assert os.path.samefile(program, other), "the link must be kept"
    assert "torch.cuda.synchronize" not in other.read_text()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="changing a file's owner needs root")
def test_the_owner_is_kept(tmp_path):
    program = tmp_path / "train.py"
    program.write_text(FIXABLE)
    os.chown(program, 4321, 4321)
    assert _fix(program, "--exit-zero") == 0
    assert "torch.cuda.synchronize" not in program.read_text()
    assert (program.stat().st_uid, program.stat().st_gid) == (4321, 4321)


def test_a_symlink_leaving_the_given_folder_is_not_followed(tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "theirs.py").write_text(FIXABLE)
    project = tmp_path / "project"
    project.mkdir()
    (project / "theirs.py").symlink_to(outside / "theirs.py")
    assert _fix(project) == 1
    assert (outside / "theirs.py").read_text() == FIXABLE
    assert "outside the folders given" in capsys.readouterr().err


def test_a_dangling_symlink_is_listed_as_not_processed(tmp_path, capsys):
    (tmp_path / "gone.py").symlink_to(tmp_path / "missing.py")
    (tmp_path / "clean.py").write_text("import torch\n")
    assert _fix(tmp_path) == 1
    err = capsys.readouterr().err
    assert "gone.py" in err and "1 file not processed" in err


def test_a_nul_byte_file_is_listed_as_not_processed(tmp_path, capsys):
    program = tmp_path / "train.py"
    program.write_bytes(FIXABLE.encode() + b"\0")
    assert _fix(program) == 1
    assert "NUL byte" in capsys.readouterr().err
