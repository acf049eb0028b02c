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
    import re

    import experiments._common as common
    import savigp.io.atomic_files as atomic_files
    from savigp.io.csv_data import write_csv
    from savigp.model_files import atomic_torch_save

    made = []
    real = atomic_files._create_temporary
    here = os.stat(tmp_path)

    def spy(name, dfd):
        fd, tmp = real(name, dfd)
        st = os.fstat(dfd)  # the temporary is made in the destination's folder, held open
        made.append((re.sub(r"\.[0-9a-f]{8}\.tmp$", ".XXXXXXXX.tmp", tmp), (st.st_dev, st.st_ino) == (here.st_dev, here.st_ino)))
        return fd, tmp

    monkeypatch.setattr(atomic_files, "_create_temporary", spy)
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
    assert made == [("." + n + ".XXXXXXXX.tmp", True) for n in names]
    assert sorted(os.listdir(tmp_path)) == sorted(names)
    assert len({_mode(tmp_path / n) for n in names}) == 1


def test_a_folder_swapped_for_a_link_after_the_check_is_not_written(tmp_path):
    """The output folder is checked, then replaced by a symbolic link to the folder of an input
    before the write: the write would land on the input; it is refused and the input unchanged."""
    from savigp.io.output_paths import OutputPathError, check_output_path

    outdir, datadir = tmp_path / "out", tmp_path / "data"
    outdir.mkdir()
    datadir.mkdir()
    data = datadir / "x.csv"
    data.write_text("a,b\n1,2\n")
    target = check_output_path(str(outdir / "x.csv"), "--out", inputs=[str(data)])
    os.rename(outdir, tmp_path / "out_old")  # between the check and the write
    os.symlink(datadir, outdir)
    with pytest.raises(OutputPathError, match="is not the folder that was checked"):
        with atomic_write(target, newline="") as fh:
            fh.write("overwritten\n")
    assert data.read_text() == "a,b\n1,2\n" and sorted(os.listdir(datadir)) == ["x.csv"]
    # the folder as checked is written as ever
    os.unlink(outdir)
    os.rename(tmp_path / "out_old", outdir)
    with atomic_write(target, newline="") as fh:
        fh.write("new\n")
    assert (outdir / "x.csv").read_text() == "new\n"


def test_stale_temporary_cleanup_never_removes_an_input(tmp_path):
    """An input named like an orphaned temporary of the output, or a hard link to one: kept."""
    import time

    from savigp.io.output_paths import check_output_path, remove_orphaned_temporaries

    data = tmp_path / ".m.pt.abcdefgh.tmp"  # the data file, named like a temporary of m.pt
    data.write_text("x,y\n1,2\n")
    other = tmp_path / "notes.txt"
    other.write_text("precious\n")
    os.link(other, tmp_path / ".m.pt.ABCDEFGH.tmp")
    stale = tmp_path / ".m.pt.zzzzzzzz.tmp"
    stale.write_text("left by a killed writer")
    old = time.time() - 3600
    for p in (data, other, stale):
        os.utime(p, (old, old))
    out = check_output_path(str(tmp_path / "m.pt"), "--out", inputs=[str(data)])
    removed = remove_orphaned_temporaries(out)
    assert removed == [str(stale)] and data.exists() and other.read_text() == "precious\n"
    assert (tmp_path / ".m.pt.ABCDEFGH.tmp").exists()  # a second name of another file: never removed
