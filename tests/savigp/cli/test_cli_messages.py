"""Failures reported where they happen: CSV problems with their line, user code that exits,
bad options, SSE where it is undefined."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from savigp.cli import main
from savigp.io.csv_data import DataError, read_csv, write_csv
from savigp.model_files import load_model

FAST = ["--num-inducing", "6", "--samples", "10", "--threads", "1", "--quiet"]


def _err(capsys):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "internal error" not in err and "Traceback" not in err, err
    return err


def test_csv_messages_name_the_line(tmp_path):
    bad = tmp_path / "latin1.csv"
    bad.write_bytes(b"a,b\n" + b"1,2\n" * 5000 + b"3,caf\xe9\n")  # deep in the file
    with pytest.raises(DataError, match=r"latin1.csv, line 5002, byte 6 of the line: not UTF-8 .*0xe9"):
        read_csv(str(bad))
    big = tmp_path / "big.csv"
    big.write_text("a,b\n1,2\n3," + "4" * 200_000 + "\n5,6\n")
    with pytest.raises(DataError, match=r"big.csv, line 3: malformed CSV: field larger than field limit"):
        read_csv(str(big))
    huge = tmp_path / "huge.csv"
    huge.write_text("a,y\n1,2\n2,1e308\n")
    with pytest.raises(DataError, match=r"huge.csv, line 3, column 'y' \(index 1\): '1e308' is too large"):
        read_csv(str(huge))
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbfa,b\n1,2\n")
    assert read_csv(str(bom)).header == ["a", "b"]


def _regression(path, n=30, constant=False):
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (n, 1))
    y = np.full(n, 0.5) if constant else np.sin(2 * X[:, 0])
    write_csv(str(path), ["x", "y"], np.column_stack([X, y]))
    return str(path)


def test_bad_device_and_undefined_sse(tmp_path, capsys):
    data = _regression(tmp_path / "d.csv")
    model = str(tmp_path / "m.pt")
    capsys.readouterr()
    assert main(["train", data, "--targets", "y", "--out", model, "--device", "bogus", *FAST]) == 2
    assert "--device 'bogus': not a device" in _err(capsys)
    assert main(["train", data, "--targets", "y", "--out", model, "--iterations", "20", *FAST]) == 0
    capsys.readouterr()  # (a 20-step run may say that its ELBO still rises)
    assert main(["predict", model, data, "--device", "bogus"]) == 2
    assert "--device 'bogus'" in _err(capsys)
    const = _regression(tmp_path / "c.csv", constant=True)
    assert main(["evaluate", model, const, "--json"]) == 0
    m = json.loads(capsys.readouterr().out)
    assert m["sse"] is None and "no variance" in m["sse_note"] and np.isfinite(m["nlpd"])
    assert main(["evaluate", model, const]) == 0
    table = capsys.readouterr().out
    assert re.search(r"^SSE +undefined \(a test target has no variance", table, re.M) and "e+299" not in table
    assert main(["evaluate", model, data, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sse"] < 1


EXITING = """
import sys
calls = [0]

def log_lik(y, f):
    calls[0] += f.shape[0] == 10  # training's calls (--samples 10), not the start's stationarity test (16 draws)
    if calls[0] > 6:
        {stop}
    return -0.5 * (y[:, 0] - f[..., 0]) ** 2 / 0.01
"""


@pytest.mark.parametrize("stop, said", [("sys.exit(0)", "called sys.exit(0)"),
                                        ("raise KeyboardInterrupt", "raised KeyboardInterrupt")])
def test_user_code_that_exits_is_a_failure_with_a_checkpoint(tmp_path, capsys, stop, said):
    data = _regression(tmp_path / "d.csv")
    lik = tmp_path / "lik.py"
    lik.write_text(EXITING.format(stop=stop))
    out = tmp_path / "m.pt"
    capsys.readouterr()
    code = main(["train", data, "--targets", "y", "--likelihood", f"{lik}:log_lik", "--iterations", "20",
                 "--checkpoint-every", "100", "--out", str(out), *FAST])
    err = _err(capsys)
    assert code == 1, err
    assert said in err and "no model written" in err and "checkpoint" in err, err
    assert not out.exists()
    ckpt = str(out) + ".ckpt"
    saved, tstate = load_model(ckpt, trust_code=True)  # a usable checkpoint at the last completed step
    step = saved.config["step"]
    assert 1 <= step < 20 and f"during step {step + 1} of 20" in err and tstate["pos"] == 0
    # once the function is fixed, training resumes from the checkpoint (the changed file needs --trust-code)
    lik.write_text(EXITING.format(stop="pass"))
    again = ["train", data, "--targets", "y", "--likelihood", f"{lik}:log_lik", "--iterations", "20",
             "--checkpoint-every", "100", "--out", str(out), *FAST, "--resume"]
    assert main(again) == 2 and "has changed since the model was trained" in _err(capsys)
    assert main(again + ["--trust-code"]) == 0 and out.exists()


@pytest.mark.parametrize("text", [
    "a,b\n1,2\n3,4\n", "1,2\n3,4", "a\n1e-3\n-2.5E+4\n", " a , b \n 1 , 2 \n", "a;b\n1;2\n", "x,y\r\n1,2\r\n",
    "a,b\n1,2\n\n3,4\n", "a,b\n1,2\n3,4,5\n5\n", "a,b\n1,nan\n", "a,b\n1,\n", "a,a\n1,2\n", '"a",b\n1,2\n',
    "a,b\n1,2e200\n", "1\n", "a,b\n",
    "\n\na,b\n1,2\n\n\n", "a,b\n1,2\n  \n3,4\n", "a,b\n,\n1,2\n", "a,b\r\n\r\n1,2\r\n3,4", "x,y\r3,4\n",
    "\ufeffa,b\n1,2\n", "température,y\n1,2\n3,4\n", "a,b\n1_0,2\n", "a,b\n1,２\n", "a\tb\n1\t2\n 3 \t 4 \n",
    "a,b\n1,2\x00\n", "a,b\n1,0x10\n", "a,b\n1,2#3\n", "a,b\n1,-inf\n", "a,b\n1,1e999\n", "a,b\n1,2,\n",
    "1,2\n3,x\n", "1,2\n3,4\n5,6,7\n", "\n \n", "", "a,b\n1,2\n3,4\n5,nan\n7,8\n",
])
@pytest.mark.parametrize("block", [4, 1 << 20])
def test_plain_files_read_as_the_general_reader_reads_them(tmp_path, monkeypatch, text, block):
    """numpy's compiled reader (plain blocks of lines) gives the same table as the careful reader
    on each block, and as the careful reader on the whole file, or leaves the block to the careful
    reader, which reports what is wrong: same values, header, line numbers and errors (blocks of a
    line each, and the whole file in one block)."""
    import savigp.io.csv_data as cd

    monkeypatch.setattr(cd, "READ_CHUNK", block)
    path = tmp_path / "f.csv"
    path.write_bytes(text.encode())
    delimiter = ";" if ";" in text else "\t" if "\t" in text else ","

    def read():
        try:
            t = read_csv(str(path), delimiter=delimiter)
            return t.header, t.values.tolist(), t.lines.tolist()
        except DataError as err:
            return str(err)

    fast = read()
    monkeypatch.setattr(cd, "_plain_block", lambda *a: None)
    assert fast == read()

    def whole_file(*a):
        raise cd._WholeFile

    monkeypatch.setattr(cd, "_read_blocks", whole_file)
    assert fast == read()
