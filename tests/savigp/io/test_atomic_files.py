"""savigp/io/atomic_files.py: the one atomic writer behind model files, CSVs, plots and experiment tables."""
import os
import stat

import numpy as np
import pytest

from savigp.io.atomic_files import atomic_write


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_finished_write_replaces_the_file_with_an_ordinary_files_mode(tmp_path):
    mask = os.umask(0o022)
    try:
        path = tmp_path / "t.csv"
        path.write_text("old")
        with atomic_write(path, newline="") as fh:
            fh.write("a,b\r\n1,2\n")
            assert path.read_text() == "old"  # nothing visible before the end
        assert path.read_bytes() == b"a,b\r\n1,2\n"  # newline="" writes the line ends as given
        assert _mode(path) == 0o644  # 0666 & ~umask, not mkstemp's 0600
        assert sorted(os.listdir(tmp_path)) == ["t.csv"]
        with atomic_write(str(tmp_path / "b.bin"), "wb") as fh:
            fh.write(b"\x00\x01")
        assert (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
    finally:
        os.umask(mask)


@pytest.mark.parametrize("error", [OSError("disk full"), KeyboardInterrupt()])
def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, error):
    path = tmp_path / "m.pt"
    path.write_bytes(b"previous")
    with pytest.raises(type(error)):
        with atomic_write(path, "wb") as fh:
            fh.write(b"partial")
            raise error
    assert path.read_bytes() == b"previous"
    assert sorted(os.listdir(tmp_path)) == ["m.pt"]


def test_bad_mode_is_refused(tmp_path):
    with pytest.raises(ValueError, match="mode must be 'w' or 'wb', got 'a'"):
        with atomic_write(tmp_path / "x", "a"):
            pass


def test_csvs_plots_model_files_and_experiment_tables_go_through_it(tmp_path, monkeypatch):
    """Each writer of the project makes its temporary file the one way (atomic_write's), and ends
    with the destination's ordinary mode and no temporary left."""
    import tempfile

    import experiments._common as common
    from savigp.io.csv_data import write_csv
    from savigp.model_files import atomic_torch_save

    made = []
    real = tempfile.mkstemp

    def spy(*a, **k):
        made.append((k.get("prefix"), k.get("suffix"), k.get("dir")))
        return real(*a, **k)

    monkeypatch.setattr(tempfile, "mkstemp", spy)
    write_csv(str(tmp_path / "p.csv"), ["a"], np.ones((2, 1)))
    common.write_text_atomic(tmp_path / "r.md", "# r\n")
    common.write_csv_atomic(tmp_path / "r.csv", [{"a": 1.0}])
    atomic_torch_save({"x": 1}, str(tmp_path / "m.pt"))
    names = ["p.csv", "r.md", "r.csv", "m.pt"]
    try:
        import matplotlib  # noqa: F401  (an extra: plots are checked where it is installed)
    except ImportError:
        matplotlib = None
    if matplotlib is not None:
        from savigp.io.plotting import save_elbo_plot

        save_elbo_plot([1.0, 2.0, 3.0], str(tmp_path / "e.png"))
        names.append("e.png")
    assert made == [("." + n + ".", ".tmp", str(tmp_path)) for n in names]
    assert sorted(os.listdir(tmp_path)) == sorted(names)
    assert len({_mode(tmp_path / n) for n in names}) == 1
