"""The command line against careless and hostile use: columns matched by name, output paths that
never replace an input, a link's meaning or a device, temporary files cleaned up."""
from __future__ import annotations

import os
import time

import numpy as np
import pytest

from savigp.cli import main
from savigp.io.csv_data import write_csv
from savigp.io.output_paths import OutputPathError, check_output_path, remove_orphaned_temporaries

FAST = ["--num-inducing", "6", "--samples", "10", "--threads", "1", "--quiet", "--iterations", "3"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A model trained on columns x1, x2 -> y, and its data."""
    folder = tmp_path_factory.mktemp("trained")
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (30, 2))
    y = np.sin(2 * X[:, 0]) + 0.5 * X[:, 1]
    data = str(folder / "d.csv")
    write_csv(data, ["x1", "x2", "y"], np.column_stack([X, y]))
    model = str(folder / "m.pt")
    assert main(["train", data, "--targets", "y", "--out", model, *FAST]) == 0
    return folder, data, model, X, y


def _err(capsys):
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "internal error" not in err, err
    return err


def test_columns_are_matched_by_name(trained, tmp_path, capsys):
    folder, data, model, X, y = trained
    capsys.readouterr()
    assert main(["predict", model, data, "--out", str(tmp_path / "ref.csv"), "--quiet"]) == 0
    ref = np.loadtxt(tmp_path / "ref.csv", delimiter=",", skiprows=1)
    # the columns in another order are found by name: the same predictions
    shuffled = str(tmp_path / "shuffled.csv")
    write_csv(shuffled, ["y", "x2", "x1"], np.column_stack([y, X[:, 1], X[:, 0]]))
    assert main(["predict", model, shuffled, "--out", str(tmp_path / "p.csv"), "--quiet"]) == 0
    assert np.array_equal(np.loadtxt(tmp_path / "p.csv", delimiter=",", skiprows=1), ref)
    # a renamed column is an error listing the expected and the found names (predict and evaluate)
    renamed = str(tmp_path / "renamed.csv")
    write_csv(renamed, ["x1", "y", "x2_renamed"], np.column_stack([X[:, 0], y, X[:, 1]]))
    for cmd in (["predict", model, renamed], ["evaluate", model, renamed]):
        assert main(cmd) == 2
        err = _err(capsys)
        assert "'x2' are missing: expected 'x1', 'x2', found 'x1', 'y', 'x2_renamed'" in err and "--positional" in err
    # other names, or no header: an error; by position only with --positional
    other = str(tmp_path / "abc.csv")
    write_csv(other, ["a", "b", "c"], np.column_stack([X, y]))
    assert main(["predict", model, other]) == 2 and "missing" in _err(capsys)
    headerless = str(tmp_path / "noheader.csv")
    with open(headerless, "w") as fh:
        fh.write("\n".join(",".join(repr(float(v)) for v in row) for row in np.column_stack([X, y])) + "\n")
    assert main(["evaluate", model, headerless]) == 2 and "has no header row" in _err(capsys)
    for f in (other, headerless):
        assert main(["predict", model, f, "--positional", "--out", str(tmp_path / "q.csv"), "--quiet"]) == 0
        assert np.array_equal(np.loadtxt(tmp_path / "q.csv", delimiter=",", skiprows=1), ref)
    assert main(["evaluate", model, other, "--positional"]) == 0


def test_output_paths_never_replace_inputs_links_or_devices(trained, tmp_path, capsys):
    folder, data, model, X, y = trained
    before_data, before_model = open(data, "rb").read(), open(model, "rb").read()
    capsys.readouterr()
    assert main(["train", data, "--targets", "y", "--out", data, *FAST]) == 2
    assert "is an input of this command" in _err(capsys)
    assert main(["predict", model, data, "--out", model]) == 2
    assert "is an input of this command" in _err(capsys)
    link = tmp_path / "link_to_data.csv"
    link.symlink_to(data)
    assert main(["predict", model, data, "--out", str(link)]) == 2  # the same file through a link
    assert "is an input" in _err(capsys)
    assert open(data, "rb").read() == before_data and open(model, "rb").read() == before_model
    assert main(["train", data, "--targets", "y", "--out", "-", *FAST]) == 2
    assert "not to standard output" in _err(capsys)

    # a FIFO is refused at once (its reader is not left hanging); a device too
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert main(["predict", model, data, "--out", str(fifo)]) == 2
    assert "is a FIFO (named pipe), not a regular file" in _err(capsys) and fifo.is_fifo()
    with pytest.raises(OutputPathError, match="is a character device"):
        check_output_path("/dev/null", "--out")  # only checked: nothing is written

    # a symlink to a file: its target is replaced, the link stays a link (and it is said)
    real = tmp_path / "real.csv"
    real.write_text("old\n")
    out_link = tmp_path / "out_link.csv"
    out_link.symlink_to(real)
    assert main(["predict", model, data, "--out", str(out_link)]) == 0
    assert "symbolic link; writing to its target" in capsys.readouterr().err
    assert out_link.is_symlink() and real.read_text().startswith("mean_y,var_y")


def test_orphaned_temporary_files_are_cleaned(trained, tmp_path, capsys):
    folder, data, model, X, y = trained
    out = tmp_path / "m.pt"
    old = [tmp_path / ".m.pt.abcd1234.tmp", tmp_path / ".m.pt.ckpt.zz_Y9x0q.tmp"]
    young = tmp_path / ".m.pt.young123.tmp"
    for p in old + [young]:
        p.write_bytes(b"partial checkpoint")
    for p in old:
        os.utime(p, (time.time() - 3600, time.time() - 3600))
    unrelated = tmp_path / ".other.pt.abcd1234.tmp"
    unrelated.write_bytes(b"x")
    os.utime(unrelated, (time.time() - 3600, time.time() - 3600))
    assert main(["train", data, "--targets", "y", "--out", str(out), *FAST[:-3], "--iterations", "2"]) == 0
    err = capsys.readouterr().err
    assert all(not p.exists() for p in old) and young.exists() and unrelated.exists()
    assert err.count("a temporary file left by an interrupted write") == 2
    assert remove_orphaned_temporaries(str(out), min_age_s=0) == [str(young)]


def test_no_spelling_of_an_output_path_replaces_an_input(trained, tmp_path, capsys, monkeypatch):
    """``..`` after a missing or a symlinked folder, ``./``, ``//``, absolute paths and hard links:
    the path is resolved as the kernel resolves it, checked, and written exactly there."""
    import shutil

    folder, data, model, X, y = trained
    monkeypatch.chdir(tmp_path)
    shutil.copy(data, "test.csv")
    shutil.copy(model, "m.pt")
    (tmp_path / "far" / "sub").mkdir(parents=True)
    os.symlink("far/sub", "other")  # other/.. is far, not the working folder
    os.link("test.csv", "hard.csv")  # the same inode under another name
    before = {f: open(f, "rb").read() for f in ("test.csv", "m.pt")}
    cwd = str(tmp_path)
    refused = {
        "predict": ["nonexist/../test.csv", "nonexist/../m.pt", "./test.csv", ".//test.csv", f"/{cwd}/test.csv",
                    f"{cwd}/./far/../test.csv", "hard.csv", "other/../../test.csv", "other/../sub/../../m.pt"],
        "train": ["nonexist/../test.csv", "other/../../test.csv", "hard.csv"],
    }
    for cmd, outs in refused.items():
        for out in outs:
            argv = (["predict", "m.pt", "test.csv", "--out", out] if cmd == "predict" else
                    ["train", "test.csv", "--targets", "y", "--out", out, *FAST])
            assert main(argv) == 2, (cmd, out)
            err = _err(capsys)
            assert ("is an input of this command" in err) != out.startswith("nonexist/"), (out, err)
            assert out.startswith("nonexist/") <= ("the folder nonexist/.. does not exist" in err), (out, err)
    for plot in ("nonexist/../test.csv", "hard.csv", "other/../../m.pt"):
        assert main(["predict", "m.pt", "test.csv", "--out", "p.csv", "--plot", plot]) == 2, plot
        _err(capsys)
    assert main(["predict", "m.pt", "test.csv", "--out", "missing/../p.csv"]) == 2
    assert "--out missing/../p.csv: the folder missing/.. does not exist" in _err(capsys)
    assert {f: open(f, "rb").read() for f in ("test.csv", "m.pt")} == before and not os.path.exists("p.csv")
    # the symlinked folder's `..` is far: written there, as the kernel would
    assert main(["predict", "m.pt", "test.csv", "--out", "other/../test.csv", "--quiet"]) == 0
    assert (tmp_path / "far" / "test.csv").read_text().startswith("mean_y,var_y")
    assert open("test.csv", "rb").read() == before["test.csv"]
    assert main(["train", "test.csv", "--targets", "y", "--out", "other/../m.pt", *FAST]) == 0
    assert (tmp_path / "far" / "m.pt").exists() and open("m.pt", "rb").read() == before["m.pt"]
    # a likelihood file is an input as well
    (tmp_path / "lik.py").write_text("def log_lik(y, f):\n    return -0.5 * (y - f[..., 0:1]).sum(-1) ** 2\n")
    code = open("lik.py", "rb").read()
    assert main(["train", "test.csv", "--targets", "y", "--likelihood", "lik.py:log_lik", "--out", "x/../lik.py",
                 *FAST]) == 2
    assert main(["train", "test.csv", "--targets", "y", "--likelihood", "lik.py:log_lik", "--out", "./lik.py",
                 *FAST]) == 2
    assert "is an input" in capsys.readouterr().err
    for lik in ("lik:log_lik", "lik", "lik.py", f"{tmp_path}/lik.py:log_lik"):  # a module name too
        assert main(["predict", "m.pt", "test.csv", "--likelihood", lik, "--out", "other/../../lik.py"]) == 2
        assert "is an input of this command" in _err(capsys), lik
    assert open("lik.py", "rb").read() == code


def test_atomic_write_resolves_the_folder_as_the_kernel_does(tmp_path, monkeypatch):
    from savigp.io.atomic_files import atomic_write

    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep.txt").write_text("input\n")
    (tmp_path / "far" / "sub").mkdir(parents=True)
    os.symlink("far/sub", "other")
    with pytest.raises(FileNotFoundError, match="the folder nonexist/.. does not exist"):
        with atomic_write("nonexist/../keep.txt") as fh:
            fh.write("replaced\n")
    with atomic_write("other/../keep.txt") as fh:
        fh.write("new\n")
    assert (tmp_path / "keep.txt").read_text() == "input\n" and (tmp_path / "far" / "keep.txt").read_text() == "new\n"
    assert sorted(os.listdir(tmp_path)) == ["far", "keep.txt", "other"] and sorted(os.listdir("far")) == ["keep.txt", "sub"]


def test_predict_never_replaces_the_code_it_runs_by_consent(tmp_path, capsys):
    """``predict m.pt test.csv --trust-code --out mylik.py``: the file the model records (and
    --trust-code runs) is an input of the command, as one named by --likelihood is."""
    rng = np.random.default_rng(1)
    X = rng.uniform(-2, 2, (20, 1))
    data = str(tmp_path / "d.csv")
    write_csv(data, ["x", "y"], np.column_stack([X, np.sin(X[:, 0])]))
    lik = tmp_path / "mylik.py"
    lik.write_text("def log_lik(y, f):\n    return -0.5 * (y[:, 0] - f[..., 0]) ** 2\n")
    model = str(tmp_path / "m.pt")
    assert main(["train", data, "--targets", "y", "--likelihood", f"{lik}:log_lik", "--out", model, *FAST]) == 0
    capsys.readouterr()
    before = lik.read_bytes()
    for consent in (["--trust-code"], ["--likelihood", str(lik)]):
        assert main(["predict", model, data, *consent, "--out", str(lik), "--quiet"]) == 2
        err = _err(capsys)
        assert "is an input of this command" in err and str(lik) in err, err
        assert lik.read_bytes() == before
    assert main(["predict", model, data, "--trust-code", "--out", str(tmp_path / "p.csv"), "--quiet"]) == 0


def test_a_plot_format_matplotlib_cannot_write_is_refused_before_training(trained, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    folder, data, model, X, y = trained
    capsys.readouterr()
    out = str(tmp_path / "m.pt")
    assert main(["train", data, "--targets", "y", "--out", out, "--plot", str(tmp_path / "elbo.xyz"), *FAST]) == 2
    err = _err(capsys)
    assert "--plot" in err and "cannot write .xyz" in err and ".png" in err, err
    assert not os.path.exists(out)  # refused before training: no model written


def test_a_very_long_header_name_is_not_echoed_whole(tmp_path, capsys):
    long = "x" * 100_000
    rng = np.random.default_rng(2)
    X = rng.uniform(-2, 2, (10, 2))
    data = str(tmp_path / "d.csv")
    write_csv(data, [long, "x2", "y"], np.column_stack([X, X[:, 0]]))
    for cmd in (["train", data, "--targets", "z", "--out", str(tmp_path / "m.pt")],
                ["train", data, "--targets", "y", "--inputs", "nope", "--out", str(tmp_path / "m.pt")]):
        assert main(cmd) == 2
        err = _err(capsys)
        assert len(err) < 1000 and "(100000 characters)" in err, err[:300]
