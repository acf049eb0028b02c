"""``savigp report``: a model file and its CSV make one HTML page (exit 0), with the test file's
coverage when given; bad input is a one-line error with exit status 2."""
from html.parser import HTMLParser

import numpy as np
import pytest

from savigp.cli import main


class _Sections(HTMLParser):
    def __init__(self, text):
        super().__init__()
        self.ids, self.images = [], 0
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag == "section":
            self.ids.append(dict(attrs)["id"])
        self.images += tag == "img" and dict(attrs)["src"].startswith("data:image/png;base64,")


@pytest.fixture(scope="module")
def counts_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("report")
    rng = np.random.default_rng(0)
    t = np.sort(rng.uniform(0, 10, 60))
    n = rng.poisson(np.exp(1 + np.sin(t)))
    data, model = folder / "counts.csv", folder / "counts.pt"
    np.savetxt(data, np.c_[t, n], delimiter=",", header="year,n", comments="", fmt="%.6g")
    assert main(["train", str(data), "--targets", "n", "--likelihood", "poisson", "--kernel", "rbf(year)",
                 "--optimizer", "lbfgs", "--iterations", "10", "--num-inducing", "10", "--quiet"]
                + ["--out", str(model)]) == 0
    return folder, data, model


def test_report_writes_one_page_with_the_test_files_coverage(counts_model, capsys):
    folder, data, model = counts_model
    out = folder / "report.html"
    assert main(["report", str(model), str(data), "--test", str(data), "--samples", "200", "--out", str(out),
                 "--title", "Counts per year"]) == 0
    assert capsys.readouterr().err.strip() == f"wrote {out}"
    text = out.read_text()
    page = _Sections(text)
    assert page.ids == ["model", "parts", "fit", "checks", "training"] and page.images == 4
    assert "<title>Counts per year</title>" in text and "a smooth trend in year, varying over about" in text and "share of zeros" in text
    # savigp train keeps the ELBO per step in the model file (config.training.elbo_trace): the page draws it
    assert text.count("<td>test</td>") == 3 and "10 steps; last ELBO" in text
    from savigp.model_files import load_model

    assert len(load_model(str(model))[0].config["training"]["elbo_trace"]) == 10


@pytest.mark.parametrize("extra, message", [
    (["--targets", "count"], "--targets"),
    (["--test", "missing.csv"], "missing.csv"),
])
def test_bad_input_is_one_line_and_exit_2(counts_model, capsys, extra, message):
    folder, data, model = counts_model
    code = main(["report", str(model), str(data), "--out", str(folder / "bad.html"), *extra])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and "\n" not in err and err.startswith("savigp report: error: ")
    assert not (folder / "bad.html").exists()


def test_a_model_chosen_by_the_kernel_search_shows_the_searchs_table(counts_model, capsys):
    folder, data, _ = counts_model
    model, out = folder / "searched.pt", folder / "searched.html"
    assert main(["train", str(data), "--targets", "n", "--likelihood", "poisson", "--kernel", "search",
                 "--search-base", "rbf,linear", "--search-max-terms", "1", "--search-iterations", "20",
                 "--num-inducing", "10", "--quiet", "--out", str(model)]) == 0
    assert main(["report", str(model), str(data), "--samples", "100", "--out", str(out)]) == 0
    text = out.read_text()
    assert _Sections(text).ids[-1] == "search"
    assert "<td>rbf</td>" in text and "<td>linear</td>" in text and "Chosen: " in text
