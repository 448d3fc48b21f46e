"""scripts/compare_gate_model.py re-decides logged samples and models ties by the paired gate's own rule: an
inconclusive check is counted apart (never as a pass), and a timer tick far above the threshold is shown for
the blind spot it is."""

from __future__ import annotations

from pathlib import Path

from _load import load_file

cgm = load_file("compare_gate_model", Path(__file__).resolve().parents[2] / "scripts" / "compare_gate_model.py")


def test_logged_series_are_re_decided_with_the_inconclusive_ones_counted_apart() -> None:
    tied_aa = {"kind": "paired", "case": "k", "scenario": "aa", "base": [10.0] * 20, "head": [10.0] * 20}
    undecided = {"kind": "paired", "case": "k", "scenario": "slow",
                 "base": [100.0] * 10, "head": [100.0] * 2 + [120.0] * 8}
    slower = {"kind": "paired", "case": "k", "scenario": "slow2", "base": [100.0] * 12, "head": [103.0] * 12}
    (row,) = cgm.measured_rows([tied_aa, undecided, slower])
    assert row["family"] == "k" and row["aa"]["failures"] == 0 and row["aa"]["trials"] == 1
    assert row["scaled"]["0.02"]["failures"] == 1 and row["scaled"]["0.03"]["failures"] == 1
    assert row["real"]["0.03"]["failures"] == 0  # two ties of ten leave the +20% undecided: not a failure ...
    assert row["inconclusive"] == 1  # ... and not a pass either
    assert row["real"]["0.02"]["failures"] == 1
    text = cgm.render(None, [row], trials=0, seed=0, sources=["log.jsonl"])
    assert "| compare (paired) | k | 0/1 " in text and text.rstrip().endswith("| 1 |")


def test_a_tick_far_above_the_threshold_hides_a_slowdown_and_the_model_says_so() -> None:
    rows = {r["model"]: r for r in cgm.tied_rows(trials=200, seed=3)}
    fine = rows["tied timer: 20 us kernel, 0.5 us ticks, 2% noise"]["rates"]
    coarse = rows["tied timer: 5 us kernel, 0.5 us ticks, 2% noise"]["rates"]
    assert fine["0.0"]["fail"]["failures"] == 0 and fine["0.03"]["fail"]["rate"] > 0.9
    assert fine["0.0"]["tied"] > 0.2  # pairs tie often, and the gate still holds both targets
    # one tick is 10% of the 5 us kernel: nearly every pair ties and +3% is not seen
    assert coarse["0.03"]["tied"] > 0.7 and coarse["0.03"]["fail"]["failures"] == 0
