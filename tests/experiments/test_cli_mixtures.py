"""experiments/cli_mixtures.py: the commands it runs for each row and its verdict against fg's spread."""
from experiments import cli_mixtures


def test_rows_use_the_commands_defaults_or_the_fg_rows_file(tmp_path):
    """A factorized row passes no --hypers (the command's default), or with the fg row's file its stage 1
    as --warm-start FILE --learn posterior; SF < 1 is a fixed subset of round(SF N) inputs."""
    args = ("boston", "mog2", 3, 0.5, 301, tmp_path, tmp_path / "m.pt", "default")
    argv = cli_mixtures.train_command(*args)
    assert argv[argv.index("--posterior") + 1] == "diag-u" and argv[argv.index("--components") + 1] == "2"
    assert "--hypers" not in argv and "--warm-start" not in argv and "--dense" not in argv
    assert argv[argv.index("--num-inducing") + 1] == "150" and "--fixed-inducing" in argv
    reuse = cli_mixtures.train_command(*args, fg_file=tmp_path / "fg.pt")
    assert reuse[reuse.index("--warm-start") + 1] == str(tmp_path / "fg.pt") and "posterior" in reuse
    assert "--warm-start" not in cli_mixtures.train_command("boston", "fmog2", 3, 1.0, 301, tmp_path, tmp_path / "m.pt",
                                                            "default", fg_file=tmp_path / "fg.pt")
    joint = cli_mixtures.train_command(*args[:-1], "joint")
    assert joint[joint.index("--hypers") + 1] == "joint" and "--dense" in cli_mixtures.train_command(
        "boston", "fg", 3, 1.0, 301, tmp_path, tmp_path / "m.pt", "default")


def test_summary_is_within_only_inside_fgs_spread_and_the_coverage_tolerance():
    """fg's SSE 0.10 / 0.14 (sd 0.02), NLPD 2.5 / 2.7 (sd 0.1), coverage 0.90 / 0.88: a row at 0.13 / 2.65 /
    0.875 is within; one whose coverage is 0.03 lower is not, and says which metric."""
    def row(name, split, sse, nlpd, cov):
        return {"sf": 1.0, "row": name, "split": split, "sse": sse, "nlpd": nlpd, "coverage90": cov}

    rows = [row("fg", 1, 0.10, 2.5, 0.90), row("fg", 2, 0.14, 2.7, 0.88),
            row("good", 1, 0.12, 2.6, 0.88), row("good", 2, 0.14, 2.7, 0.87),
            row("narrow", 1, 0.10, 2.5, 0.87), row("narrow", 2, 0.14, 2.7, 0.85)]
    lines = {ln.split("|")[2].strip(): ln for ln in cli_mixtures.summary("boston", rows).splitlines()
             if ln.startswith("| 1 |")}
    assert lines["good"].rstrip().endswith("| yes |")
    assert lines["narrow"].rstrip().endswith("| no: coverage90 |")
    assert "0.120 (0.020)" in lines["fg"]
