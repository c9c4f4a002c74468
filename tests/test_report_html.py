"""report_html: one self-contained HTML page from a results folder, checked in headless Chromium."""

from __future__ import annotations

import json
import random
import re
import shlex
import shutil
import subprocess

import pytest

from imsearch_align.experiment import ExperimentConfig, RunStatus, sweep
from imsearch_align.report_html import (
    CellError,
    ReportError,
    build_page,
    collect,
    pareto_frontier,
    read_cell,
    write_report,
)
from imsearch_align.report_html.cli import add_report_command, run_report
from imsearch_align.report_html.commands import commands_for, eval_command, redact, sweep_command
from imsearch_align.report_html.production import saturation

SYN = {"n_images": 160, "captions_per_image": 2, "seed": 3, "d_image": 20, "d_text": 16}
SECRET_URI = "http://alice:s3cret@db.example:19530"


def _base(**kw) -> ExperimentConfig:
    return ExperimentConfig(dataset="synthetic", dataset_params=SYN, image_encoder=None,
                            text_encoder=None, cache_dir=None, k_values=(1, 10), **kw)  # fmt: skip


def _cell(kind: str, **fields) -> dict:
    return {"kind": kind, "store": "milvus", "method": "csa", "dataset": "flickr30k", **fields}


def _scale_cells() -> list[dict]:
    out = []
    for size, decay in ((10_000, 1.0), (100_000, 0.9)):
        out.append(_cell("collection_scale", index={"type": "FLAT"}, collection={"size": size},
                         metrics={"t2i/HitRate@10": 0.6 * decay}, queries_per_s=3e6 / size,
                         command=["python", "benchmarks/collection.py", "--uri", SECRET_URI]))  # fmt: skip
        for ef, rec, qps in ((16, 0.93, 4000.0), (64, 0.999, 1300.0)):
            out.append(_cell("collection_scale", index={"type": "HNSW", "search_params": {"ef": ef}},
                             collection={"size": size}, queries_per_s=qps,
                             metrics={"t2i/HitRate@10": 0.6 * decay * rec, "t2i/ann_recall@10": rec}))  # fmt: skip
    return out


def _production_cells() -> list[dict]:
    out = [
        _cell("concurrency", index={"type": "HNSW"}, concurrency=c, queries_per_s=q,
              latency_ms={"p50": 1000 * c / q, "p95": 1500 * c / q, "p99": 2500 * c / q})
        for c, q in ((1, 300.0), (2, 580.0), (4, 1000.0), (8, 1300.0), (16, 1320.0))
    ]  # fmt: skip
    out += [
        _cell("filtered", index={"type": "HNSW"}, queries_per_s=200 + 1000 * s,
              filter={"selectivity": s, "expression": "category == 'x'"},
              metrics={"t2i/HitRate@10": 0.5 * r, "t2i/ann_recall@10": r})
        for s, r in ((1.0, 0.99), (0.5, 0.98), (0.1, 0.9), (0.01, 0.6))
    ]  # fmt: skip
    return out


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory):
    """Real results of a tiny sweep (2 methods x 2 support sizes, FAISS flat and HNSW),
    one degraded and one failed copy, hand-made study cells, and two files to skip."""
    root = tmp_path_factory.mktemp("report")
    rs = sweep(_base(ann_fidelity=True), output_dir=root / "sweep", progress=False,
               methods=["csa", "procrustes"], n_values=[40, 120])  # fmt: skip
    hnsw = sweep(_base(store_params={"index": "hnsw", "M": 8}, n_support=120, ann_fidelity=True),
                 output_dir=root / "hnsw", output_template="{method}_{key}.json", progress=False)  # fmt: skip
    assert all(r.status.ok for r in rs + hnsw)
    bad = rs[0].with_(config=rs[0].config.replace(name="<script>alert('x')</script>"),
                      status=RunStatus("degraded", ("t2i: 3 of 80 queries failed",)))  # fmt: skip
    (root / "bad").mkdir()
    (root / "bad" / "degraded.json").write_text(bad.to_json())
    failed = rs[1].with_(config=rs[1].config.replace(store_params={"uri": SECRET_URI}),
                         status=RunStatus("failed", error=f"cannot reach {SECRET_URI}"), task=None)  # fmt: skip
    (root / "bad" / "failed.json").write_text(failed.to_json())
    study = root / "study"
    study.mkdir()
    for i, cell in enumerate(_scale_cells() + _production_cells()):
        (study / f"cell{i:02d}.json").write_text(json.dumps(cell))
    (study / "broken_cell.json").write_text(json.dumps({"kind": "filtered", "store": "x", "method": "y"}))  # fmt: skip
    (study / "notes.json").write_text("[1, 2, 3]")
    return root


@pytest.fixture(scope="module")
def page(results_dir):
    return write_report(results_dir).read_text(encoding="utf-8")


def test_every_section_is_there_with_its_figures(page, results_dir):
    for sid in ("leaderboard", "quality-vs-qps", "quality-vs-size", "learning-curves",
                "concurrency", "filtered", "provenance", "skipped"):  # fmt: skip
        assert f'<section id="{sid}">' in page
    assert 'class="note"' not in page.split('<section id="provenance">')[0]
    n_fig = page.count('<figure class="chart"')
    assert n_fig == page.count('<svg class="plot"') >= 9
    assert "Pareto frontier" in page and "exact search · csa (ceiling)" in page
    assert "saturates at 8 clients" in page
    rows = page.split('<table class="board">')[1].split("</table>")[0].count("<tr>") - 1
    assert rows == 4 + 1 + 2  # the sweep's and the HNSW cell, the degraded and the failed copy
    assert 'class="st-degraded"' in page and 'class="st-failed"' in page
    assert "3 of 80 queries failed" in page
    assert "broken_cell.json" in page and "field &#x27;filter.selectivity&#x27; is missing" in page
    assert "imsearch-align sweep" in page and "--methods csa procrustes" in page
    assert "faiss-cpu" in page  # provenance: versions
    found = collect(results_dir)
    assert len(found.results) == 7 and len(found.cells) == len(_scale_cells()) + 9


def test_text_is_escaped_and_secrets_never_shown(page):
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    assert "s3cret" not in page and "alice" not in page
    assert "http://db.example:19530" in page  # the command, without its user information


def test_nothing_is_loaded_from_anywhere(page):
    assert "default-src 'none'" in page  # the page's CSP forbids every fetch
    assert not re.search(r"""(src|href|xlink:href|action)\s*=\s*["']?(https?:|//)""", page, re.I)
    assert "@import" not in page and "url(" not in page
    assert all(h.startswith("#") for h in re.findall(r'href="([^"]*)"', page))
    assert page.count("<script>") == 1  # the inline figure check, nothing else


def test_a_section_without_its_kind_of_result_is_one_note(tmp_path, results_dir):
    shutil.copytree(results_dir / "sweep", tmp_path / "only")
    html = build_page(collect(tmp_path / "only"))
    assert 'id="fig-' in html
    for sid in ("concurrency", "filtered", "quality-vs-size"):
        body = html.split(f'<section id="{sid}">')[1].split("</section>")[0]
        assert body.count('<p class="note">') == 1 and "<figure" not in body
    cells = tmp_path / "cells"
    cells.mkdir()
    (cells / "c.json").write_text(json.dumps(_production_cells()[0]))
    html = build_page(collect(cells))
    assert "no experiment results" in html and html.count('<figure class="chart"') == 2


def test_a_folder_of_study_cells_has_a_leaderboard_of_them(tmp_path, page):
    cells = _scale_cells()
    cells[1]["status"] = {"state": "degraded", "reasons": ["<b>2 of 9</b> queries lost"]}
    cells[2]["method"] = "<script>alert(1)</script>"
    cells[2]["exact_metrics"] = {"t2i/HitRate@10": 0.61}
    cells.append(_cell("collection_scale", index={"type": "IVF_FLAT", "params": {"nlist": 4}},
                       status={"state": "failed", "error": f"lost {SECRET_URI}"}))  # fmt: skip
    for i, cell in enumerate(cells + _production_cells()[:1]):
        (tmp_path / f"c{i}.json").write_text(json.dumps(cell))
    html = build_page(collect(tmp_path))
    board = html.split('<section id="leaderboard">')[1].split("</section>")[0]
    assert '<p class="note">' not in board and board.count('<table class="board study">') == 1
    body = board.split("<tbody>")[1].split("</tbody>")[0]
    assert body.count("<tr>") == len(cells)  # a row per collection_scale cell, none for the rest
    assert body.count('class="st-ok"') == len(cells) - 2
    assert 'class="st-degraded"' in body and 'class="st-failed"' in body
    assert "&lt;b&gt;2 of 9&lt;/b&gt; queries lost" in body and "<b>2 of 9" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body and "<script>alert" not in html
    assert "s3cret" not in html and "alice" not in html and "lost http://db.example:19530" in body
    # Sorted by method, store, size, then quality best first; the failed cell last.
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", r) for r in body.split("</tr>")[:-1]]
    csa = [r for r in rows if r[0] == "csa"]
    assert [r[5] for r in csa] == ["10,000"] * 2 + ["100,000"] * 3 + ["-"]
    assert [r[6] for r in csa] == ["<strong>0.600</strong>", "0.558",
                                   "<strong>0.540</strong>", "0.539", "0.502", "-"]  # fmt: skip
    assert csa[-1][-1].startswith("failed: ") and csa[0][-1] == "ok"
    assert ["0.610" in r for r in rows].count(True) == 1  # the recorded exact quality
    assert "efSearch=16" not in body and "ef=16" in body and "nlist=4" in body
    prov = html.split('<section id="provenance">')[1].split("</section>")[0]
    assert "c0.json" in prov
    # Beside experiment results, the cells' table follows the results' leaderboard.
    assert "Collection-scale study cells" not in html
    board = page.split('<section id="leaderboard">')[1].split("</section>")[0]
    assert board.index('<table class="board">') < board.index("<h3>Collection-scale study cells")
    assert board.split('<table class="board study">')[1].count("<tr>") == 1 + len(_scale_cells())


def test_a_folder_with_no_result_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "x.json").write_text('{"a": 1}')
    with pytest.raises(ReportError, match="no result for the report"):
        collect(tmp_path)
    import argparse

    parser = argparse.ArgumentParser()
    add_report_command(parser.add_subparsers())
    for folder in (tmp_path, tmp_path / "missing"):
        assert run_report(parser.parse_args(["report", str(folder)])) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "\n" not in err
    assert not (tmp_path / "report.html").exists()


def test_a_file_that_is_not_a_report_of_ours_is_never_replaced(results_dir, tmp_path, capsys):
    import argparse

    parser = argparse.ArgumentParser()
    add_report_command(parser.add_subparsers())
    mine = tmp_path / "notes.html"
    mine.write_text("my notes")
    args = parser.parse_args(["report", str(results_dir), "--output", str(mine)])
    assert run_report(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "not a report written by imsearch-align" in err
    assert mine.read_text() == "my notes"
    ours = tmp_path / "report.html"
    again = parser.parse_args(["report", str(results_dir), "--output", str(ours)])
    assert run_report(again) == 0 and run_report(again) == 0  # an earlier report is replaced


def _dominated(p, q) -> bool:
    return q[0] >= p[0] and q[1] >= p[1] and (q[0] > p[0] or q[1] > p[1])


def test_pareto_frontier_matches_its_definition():
    rng = random.Random(7)
    for _ in range(300):
        pts = [(rng.randint(0, 6), rng.randint(0, 6)) for _ in range(rng.randint(1, 12))]
        direct = [i for i, p in enumerate(pts) if not any(_dominated(p, q) for q in pts)]
        assert pareto_frontier(pts) == direct, pts
    assert pareto_frontier([]) == []


def test_saturation_is_where_queries_per_second_stop_growing():
    assert saturation([(1, 300), (2, 580), (4, 1000), (8, 1300), (16, 1320)]) == 8
    assert saturation([(1, 100), (2, 200), (4, 400)]) is None
    assert saturation([(1, 100), (2, 101), (4, 300)]) is None


def _parsed(cmd: str):
    from imsearch_align.cli.app import build_parser
    from imsearch_align.cli.config_flags import GIVEN, given_flags

    argv = shlex.split(cmd)[1:]
    args = build_parser().parse_args(argv)
    setattr(args, GIVEN, given_flags(argv))
    return args


def test_commands_give_back_the_recorded_configs():
    cfg = _base(method="asif", method_params={"non_zeros": 64, "tag": "12"},
                store_params={"index": "hnsw", "efSearch": 32}, n_support=None,
                ann_fidelity=True, name="a b")  # fmt: skip
    from imsearch_align.cli.config_flags import config_mapping
    from imsearch_align.experiment import grid

    args = _parsed(eval_command(cfg.to_dict()))
    assert ExperimentConfig.from_dict(config_mapping(args)[0]) == cfg
    base = _base(n_support=50)
    cells = grid(base, methods=["csa", "procrustes"], stores=["faiss", "exact"], n_values=[50, None],
                 method_params={"csa": {"dim": 4}, "procrustes": {}},
                 store_params={"faiss": {"index": "flat"}, "exact": {}})  # fmt: skip
    line = sweep_command([c.to_dict() for c in cells])
    assert line is not None and line.startswith("imsearch-align sweep")
    assert commands_for([c.to_dict() for c in cells]) == [line]
    assert sweep_command([c.to_dict() for c in cells[:-1]]) is None  # not a full grid
    # Per store: FAISS's four cells are one sweep, the three exact ones three evals.
    lines = commands_for([c.to_dict() for c in cells[:-1]])
    assert [ln.split()[1] for ln in lines] == ["sweep", "eval", "eval", "eval"]
    evals = [ExperimentConfig.from_dict(config_mapping(_parsed(ln))[0]) for ln in lines[1:]]
    assert evals == [c for c in cells[:-1] if c.store == "exact"]
    assert (
        redact(f"uri={SECRET_URI} and https://u@h/x")
        == "uri=http://db.example:19530 and https://h/x"
    )


def test_cells_are_checked_and_name_the_bad_field():
    assert read_cell(_scale_cells()[0]).exact
    with pytest.raises(CellError, match=r"'collection\.size' is missing"):
        read_cell(_cell("collection_scale", queries_per_s=1.0, metrics={"HitRate@10": 0.5}))
    with pytest.raises(CellError, match="'concurrency' must be an integer >= 1"):
        read_cell(_cell("concurrency", concurrency=0, queries_per_s=1.0))
    with pytest.raises(CellError, match=r"'filter.selectivity' must be in \(0, 1\]"):
        read_cell(_cell("filtered", filter={"selectivity": 1.5}, metrics={"HitRate@10": 1.0}))
    failed = read_cell(_cell("collection_scale", status={"state": "failed", "error": "boom"}))
    assert failed.status.state == "failed"


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _headless(browser: str, profile, *args: str) -> subprocess.CompletedProcess:
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0"]  # fmt: skip
    return subprocess.run([browser, *flags, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(
    _chromium() is None, reason="Chromium is not installed (apt-get install chromium)"
)
def test_the_page_renders_in_headless_chromium(results_dir, page, tmp_path):
    browser = _chromium()
    url = (results_dir / "report.html").resolve().as_uri()
    console = re.compile(r":CONSOLE[:(]")
    dom = _headless(browser, tmp_path / "p1", "--window-size=1280,2000", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = re.search(r"<body[^>]*>", dom.stdout).group(0)
    n_fig = page.count('<figure class="chart"')
    assert f'data-figures="{n_fig}"' in body and 'data-ok="yes"' in body, body
    assert not [ln for ln in dom.stderr.splitlines() if console.search(ln)], dom.stderr[-2000:]
    shot = tmp_path / "report.png"
    run = _headless(
        browser, tmp_path / "p2", "--window-size=1280,6000", f"--screenshot={shot}", url
    )
    assert run.returncode == 0 and shot.stat().st_size > 50_000
    # The console check sees errors: a page that throws is caught.
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>throw new Error('boom')</script></body></html>")
    run = _headless(browser, tmp_path / "p3", "--dump-dom", bad.as_uri())
    assert any(console.search(ln) and "boom" in ln for ln in run.stderr.splitlines())


def test_a_uri_in_a_chart_label_is_redacted_in_the_svg():
    from imsearch_align.report_html.svg import Chart, Series, render

    uri = "http://root:s3cret@db.example:19530"
    chart = Chart(
        title=f"milvus at {uri}", x_label="q/s", y_label="HitRate@10",
        series=[Series(f"milvus ({uri})", [1.0, 2.0], [0.5, 0.6], tips=[uri, uri],
                       point_labels=[uri, "x"])],
        ceilings=[(0.7, f"exact {uri}")], marks=[(1.0, 0.5, uri)],
    )  # fmt: skip
    svg = render(chart)
    assert "s3cret" not in svg and "db.example" in svg


def test_malformed_cells_and_deep_json_are_named_and_the_page_is_written(tmp_path):
    import html as html_mod

    bad = {"format": "collection-cell/1", "kind": "collection_scale", "store": "faiss",
           "method": "csa", "metrics": "oops", "collection": {"size": 3}, "queries_per_s": 1.0}  # fmt: skip
    good = {**bad, "metrics": {"t2i/HitRate@10": 0.5}}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    (tmp_path / "badprov.json").write_text(json.dumps({**good, "provenance": [1, 2]}))
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "good.json").write_text(json.dumps(good))
    page = write_report(tmp_path, tmp_path / "r.html")
    text = html_mod.unescape(re.sub(r"<[^>]+>", " ", page.read_text(encoding="utf-8")))
    assert "bad.json : a collection_scale cell with a bad field: field 'metrics'" in text
    assert "badprov.json : a collection_scale cell with a bad field: field 'provenance'" in text
    assert "deep.json : JSON nested too deeply" in text
