"""``isa.outputs``: the checks and atomic writes every tool uses for the files a user names."""

from __future__ import annotations

import argparse
import os

import pytest

from isa.errors import TetrachipError
from isa.outputs import check_outputs, check_writable, write_atomic, write_atomic_via


def test_a_failed_writer_leaves_the_old_file_and_no_temporary(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("old\n")
    os.chmod(p, 0o640)

    def half(tmp):
        tmp.write_text("half of a new ta")
        raise OSError(28, "No space left on device")
    with pytest.raises(TetrachipError, match="t.csv: cannot write: No space left on device"):
        write_atomic_via(p, half)
    assert p.read_text() == "old\n" and sorted(x.name for x in tmp_path.iterdir()) == ["t.csv"]
    seen = []
    write_atomic_via(p, lambda tmp: (seen.append(tmp.suffix), tmp.write_text("new\n")))
    assert seen == [".csv"] and p.read_text() == "new\n"      # the writer sees the suffix that picks its format
    assert p.stat().st_mode & 0o777 == 0o640                     # the file keeps its permissions
    write_atomic(p, b"bytes\n")
    assert p.read_bytes() == b"bytes\n" and sorted(x.name for x in tmp_path.iterdir()) == ["t.csv"]


def test_outputs_are_checked_before_the_work(tmp_path, capsys):
    src = tmp_path / "in.s"
    src.write_text("halt\n")
    with pytest.raises(TetrachipError, match="would overwrite the input"):
        check_writable(src, inputs=[src])
    with pytest.raises(TetrachipError, match="does not exist"):
        write_atomic(tmp_path / "missing" / "x.json", "{}")
    with pytest.raises(TetrachipError, match="is a folder"):
        check_writable(tmp_path)
    ap = argparse.ArgumentParser(prog="bench")
    check_outputs(ap, None, tmp_path / "ok.json")
    with pytest.raises(SystemExit) as e:
        check_outputs(ap, tmp_path / "ok.json", tmp_path / "no" / "x.json")
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "bench: error:" in err and "x.json: folder" in err and "Traceback" not in err
