"""The demo's claim: AFLite removes most rows carrying the planted spurious feature."""
from aflite_fast.cli._demo import demo_table


def test_demo_removes_bias_and_linear_accuracy_drops():
    measures, result, _ = demo_table(n_samples=2000, seed=3, progress=False)
    biased_before, biased_after = measures["share with spurious feature"]
    acc_before, acc_after = measures["linear model accuracy (5-fold CV)"]
    assert abs(biased_before - 0.75) < 0.01
    # most biased rows are gone: 1500 biased rows at start, the kept 500 rows hold few of them
    n_kept = measures["rows"][1]
    assert biased_after < 0.5
    assert biased_after * n_kept < 0.2 * biased_before * measures["rows"][0]
    # the linear model loses its shortcut: accuracy falls toward chance (0.5)
    assert acc_before > 0.8
    assert acc_after < acc_before - 0.15
    assert acc_after < 0.65
