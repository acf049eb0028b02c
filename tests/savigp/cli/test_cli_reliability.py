"""Bad inputs the command line must name in one line (file, line, column) or handle: numbers
float() reads but a CSV reader should not, unterminated quotes, huge lines, data without
spread, class labels that do not fit the likelihood, and sizes that cannot fit in memory."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import likelihoods
import savigp
from savigp.io import csv_data
from savigp.cli import main
from savigp.io.csv_data import DataError, read_csv, write_csv

FAST = ["--samples", "5", "--threads", "1", "--quiet", "--iterations", "3"]


def _err(capsys):
    out = capsys.readouterr()
    err = out.err.strip()
    assert len(err.splitlines()) == 1 and "internal error" not in err and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("cell", ["1_000", "\uff11\uff12", "\u0661", "1_0e3"])
def test_numbers_are_ascii_digits_only(tmp_path, cell):
    """Python's float() reads ``1_000`` and non-ASCII digits (full-width, Arabic-Indic); no CSV
    reader does: such a cell is not a number, named by line and column (both readers)."""
    for text in (f"x,y\n1,2\n{cell},4\n", f"x,y\n1,2\n\"{cell}\",4\n"):  # the plain reader and the csv module
        p = tmp_path / "u.csv"
        p.write_text(text, encoding="utf-8")
        with pytest.raises(DataError, match=rf"u.csv, line 3, column 'x' \(index 0\): '{cell}' is not a number"):
            read_csv(str(p))
    # a file of digits only is a header-less table; a first row with such a cell is a header
    p.write_text(f"{cell},b\n1,2\n", encoding="utf-8")
    assert read_csv(str(p)).header == [cell, "b"]
    p.write_text("x_1,y\n1,2\n1e3,-.5\n", encoding="utf-8")  # underscores in the header are names
    t = read_csv(str(p))
    assert t.header == ["x_1", "y"] and t.values.tolist() == [[1.0, 2.0], [1000.0, -0.5]]


def test_an_unterminated_quote_names_the_line_it_opens(tmp_path):
    p = tmp_path / "q.csv"
    p.write_text('x,y\n1,2\n3,"4\n5,6\n7,8\n')
    with pytest.raises(DataError, match=r"q.csv, line 3: malformed CSV: a quoted field opened on this line is not "
                                        r"closed \(read to line 5"):
        read_csv(str(p))
    p.write_text('x,y\n1,2\n3,"4\n')  # at the end of the file: once silently read as 4
    with pytest.raises(DataError, match=r"q.csv, line 3: malformed CSV: a quoted field opened"):
        read_csv(str(p))
    # a quoted field that spans lines is valid CSV: its row is named by the line it starts on
    p.write_text('x,y\n1,2\n3,"4\n5"\n7,8\n')
    with pytest.raises(DataError, match=r"q.csv, line 3, column 'y' \(index 1\): '4\\n5' is not a number"):
        read_csv(str(p))


@pytest.mark.parametrize("chunk", [64, 1 << 20])
def test_a_huge_line_is_named_before_it_fills_the_memory(tmp_path, monkeypatch, chunk):
    """A file that is one enormous line (2 GB made ``train`` run out of memory, exit 1, no line
    number) is refused after reading MAX_LINE_BYTES of it, naming the line (here the limit is
    1000 bytes, read in chunks smaller and larger than a line)."""
    monkeypatch.setattr(csv_data, "MAX_LINE_BYTES", 1000)
    monkeypatch.setattr(csv_data, "READ_CHUNK", chunk)
    p = tmp_path / "big.csv"
    for body, line in (("x,y\n1,2\n3," + "4" * 5000 + "\n5,6\n", 3), ("x,y\n1,2\n3,4\n5," + "6" * 5000, 4),
                       ("1" * 1001 + "\n1,2\n", 1)):
        p.write_text(body)
        with pytest.raises(DataError, match=rf"big.csv, line {line}: longer than 1000 bytes"):
            read_csv(str(p))
    p.write_text("x,y\n" + "1,2\n" * 300 + "3," + "0" * 990 + "\n")  # at the limit: read
    assert read_csv(str(p)).values.shape == (301, 2)


def test_data_without_spread_trains(tmp_path, capsys):
    """50 identical rows made the length-scale initialisation fail ("PositiveParameter: initial
    value(s) must exceed 1e-06", no file, no column); a column without spread gets length-scale
    sqrt(D), and the model fits the constant."""
    data = tmp_path / "same.csv"
    write_csv(str(data), ["x1", "x2", "y"], np.tile([[1.0, 3.0, 2.0]], (50, 1)))
    out = tmp_path / "m.pt"
    assert main(["train", str(data), "--targets", "y", "--out", str(out), "--num-inducing", "5", *FAST,
                 "--standardize-targets"]) == 0
    assert main(["predict", str(out), str(data), "--out", str(tmp_path / "p.csv"), "--quiet"]) == 0
    assert np.isfinite(read_csv(str(tmp_path / "p.csv")).values).all()
    capsys.readouterr()
    X = np.column_stack([np.full(20, 5.0), np.linspace(0, 1, 20)])
    model = savigp.SAVIGP(X, np.ones((20, 1)), likelihoods.Gaussian(), num_inducing=4)
    ls = model.kernel.lengthscales().detach()
    assert ls[0, 0].item() == pytest.approx(2 ** 0.5) and ls[0, 1].item() == pytest.approx(
        float(np.std(X[:, 1], ddof=1)) * 2 ** 0.5)


def test_class_labels_must_fit_the_likelihood(tmp_path, capsys):
    """A softmax model of 3 classes whose file lists 2 labels gave "internal error: IndexError"
    (4 labels: a header wider than the rows); now exit 2 naming the field, as are duplicates."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (40, 2))
    y = (X[:, 0] > 0).astype(float) + (X[:, 1] > 0.5)
    data = tmp_path / "c.csv"
    write_csv(str(data), ["x1", "x2", "y"], np.column_stack([X, y]))
    good = tmp_path / "c.pt"
    assert main(["train", str(data), "--targets", "y", "--likelihood", "softmax", "--out", str(good),
                 "--num-inducing", "4", *FAST]) == 0
    capsys.readouterr()
    for labels, needle in (([0.0, 1.0], "lists 2 label(s) but the likelihood Softmax has 3 classes"),
                           ([0.0, 1.0, 2.0, 3.0], "lists 4 label(s)"),
                           ([0.0, 1.0, 1.0], "class_labels must be distinct")):
        p = torch.load(str(good), weights_only=True)
        p["config"]["class_labels"] = labels
        p.pop("content_sha256", None)  # (edited: as a file written before the content digest)
        bad = tmp_path / "bad.pt"
        torch.save(p, str(bad))
        for cmd in (["predict", str(bad), str(data), "--out", "-", "--quiet"], ["evaluate", str(bad), str(data)]):
            assert main(cmd) == 2
            err = _err(capsys)
            assert needle in err and str(bad) in err


def test_a_model_that_cannot_fit_in_memory_is_refused_at_once(tmp_path, capsys):
    """``--num-inducing 20000`` on 25k rows ran for over 600 s; the memory estimate of
    savigp.cost refuses it before anything is built, with the estimate and the option that
    raises the limit, which ``--max-memory`` sets for train, predict and evaluate."""
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, 25_000)
    data = tmp_path / "big.csv"
    np.savetxt(data, np.column_stack([x, np.sin(6 * x)]), delimiter=",", header="x,y", comments="")
    out = tmp_path / "m.pt"
    assert main(["train", str(data), "--targets", "y", "--num-inducing", "20000", "--out", str(out), *FAST]) == 2
    err = _err(capsys)
    assert "M=20000" in err and "GiB of memory" in err and "--max-memory" in err and not out.exists()
    small = tmp_path / "s.csv"
    write_csv(str(small), ["x", "y"], np.column_stack([x[:40], np.sin(6 * x[:40])]))
    assert main(["train", str(small), "--targets", "y", "--num-inducing", "30", "--out", str(out), *FAST,
                 "--max-memory", "0.0001"]) == 2
    assert "more than the limit of 0.0001 GiB" in _err(capsys)
    assert main(["train", str(small), "--targets", "y", "--num-inducing", "30", "--out", str(out), *FAST]) == 0
    capsys.readouterr()
    for cmd in (["predict", str(out), str(small), "--out", "-"], ["evaluate", str(out), str(small)]):
        assert main(cmd + ["--max-memory", "0.00001"]) == 2
        assert "--max-memory" in _err(capsys)


def test_float32_inputs_far_from_zero_are_centred(tmp_path, capsys):
    """Inputs 1e8 + u (u in [0, 1]) in float32 are rounded to steps of 8: the signal was lost
    (SSE 0.328 against 0.018 in float64). ``train`` centres them (recorded, applied to test inputs
    in float64), and fits as float64 does; the library warns."""
    rng = np.random.default_rng(1)
    u = rng.uniform(0, 1, 100)
    y = np.sin(6 * u) + 0.1 * rng.standard_normal(100)
    data = tmp_path / "off.csv"
    write_csv(str(data), ["x", "y"], np.column_stack([1e8 + u, y]))
    out = tmp_path / "m.pt"
    assert main(["train", str(data), "--targets", "y", "--num-inducing", "8", "--iterations", "150", "--dtype",
                 "float32", "--out", str(out), "--threads", "1"]) == 0
    assert "centred" in capsys.readouterr().err
    stats = torch.load(str(out), weights_only=True)["config"]["standardize"]["inputs"]
    assert stats["std"] == [1.0] and stats["mean"][0] == pytest.approx(1e8 + u.mean())
    pred = savigp.load(str(out)).predict(1e8 + u[:, None], num_samples=10)["mean"].numpy()[:, 0]
    assert np.mean((pred - np.sin(6 * u)) ** 2) < 0.02  # the noise variance is 0.01; a lost signal gives ~0.5
    with pytest.warns(RuntimeWarning, match="float32 rounds away"):
        savigp.SAVIGP(1e8 + u, y, likelihoods.Gaussian(), num_inducing=4, dtype=torch.float32)
