"""study/structure_report.py's computations: whose gain (the structure's or the scale's) and the cells it reads."""

from __future__ import annotations

import json
from pathlib import Path

from study.campaign import structure
from study.campaign.advice import ADVICE_ROWS, advice_rows
from study.campaign.structure import Cell, build_structure, render_structure, structure_verdict

REPO = Path(__file__).resolve().parents[1]
REPORT = REPO / "study/records/small_data/structure/results.md"


def _record(arms: dict[str, dict[int, float]]) -> dict:
    return {"arms": {name: {"seeds": list(s), "final_top1": list(s.values())} for name, s in arms.items()}}


def _paired(per_seed: dict[int, float], verdict: str) -> dict:
    return {"n": len(per_seed), "per_seed": per_seed, "verdict": verdict}


def test_whose_gain():
    """Catches a control verdict that calls a within-spread lead the structure's, or misses the scale's."""
    assert structure_verdict(_paired({0: 3.0, 1: 4.0, 2: 5.0}, "ahead"), None) == "the structure's"
    assert structure_verdict(_paired({0: 0.5, 1: 1.0, 2: 0.2}, "tie"), None) == "partly the structure's"
    assert structure_verdict(_paired({0: -0.5, 1: 1.0, 2: 0.2}, "tie"), _paired({}, "ahead")) == "the scale's"
    assert structure_verdict(_paired({0: -0.5, 1: 1.0, 2: 0.2}, "tie"), _paired({}, "tie")) == "not separated"
    assert structure_verdict(_paired({0: 3.0}, "no verdict"), None) == "no verdict"


def test_a_cell_pairs_each_init_with_its_control_on_the_seed(tmp_path, monkeypatch):
    """Catches a control paired across seeds, or a cell that misses a record written seed by seed."""
    runs = {
        "c/results.json": {"default": {0: 20.0, 1: 21.0, 2: 22.0}, "impulse3": {0: 30.0, 1: 29.0, 2: 31.0}},
        "c/seed0-impulse3-normmatched/results.json": {"impulse3-normmatched": {0: 25.0}},
        "c/seed1-impulse3-normmatched/results.json": {"impulse3-normmatched": {1: 28.5}},
        "c/seed2-impulse3-normmatched/results.json": {"impulse3-normmatched": {2: 22.0}},
    }
    for name, arms in runs.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(json.dumps(_record(arms)))
    cell = Cell("control", "fake", ("c/results.json", "c/seed*-*/results.json"), "default",
                (("impulse3", "impulse3-normmatched"),))  # fmt: skip
    monkeypatch.setattr(structure, "CELLS", (cell,))
    record = build_structure(tmp_path)
    control = record["cells"][0]["controls"]["impulse3"]
    assert control["init_minus_control"]["per_seed"] == {0: 5.0, 1: 0.5, 2: 9.0}
    assert control["verdict"] == "partly the structure's"  # ahead on every seed, the mean 4.83 < the spread 6.5
    assert "| impulse 3x3, `shift` (default) | +4.83 ± 4.25 (+5.00, +0.50, +9.00; spread 6.50): tie | partly" in (
        render_structure(record)
    )


def test_the_committed_report_is_the_committed_records():
    """Catches records committed without rerunning study/structure_report.py."""
    assert render_structure(build_structure(REPO)) == REPORT.read_text()


def test_every_row_of_the_advice_figure_finds_its_comparisons_in_the_committed_records():
    """Catches a row whose setting or arm was renamed in the campaign record (a row silently left empty)."""
    campaign = json.loads((REPO / "study/records/small_data/campaign/results.json").read_text())
    rows = advice_rows(campaign, build_structure(REPO))
    assert len(rows) == len(ADVICE_ROWS)
    for row, spec in zip(rows, ADVICE_ROWS, strict=True):
        assert row["impulse"] is not None and row["impulse"]["n"] >= 1, spec[:2]
        assert (row["mimetic"] is None) == (spec[5] is None), spec[:2]
        assert (row["control"] is None) == (spec[6] is None), spec[:2]  # a control cell renamed: no gray point
