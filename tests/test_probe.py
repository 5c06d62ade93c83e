"""A probe's default time limit follows the model's size and the backend: a full-size model under emulation
must not be cut off after the ten minutes that fit a small one natively."""

from __future__ import annotations

import builders
import numpy as np
import pytest

from harness.probe import default_timeout


def test_small_models_natively_keep_ten_minutes_and_big_or_emulated_ones_get_more():
    assert default_timeout(500_000, emulated=False) == pytest.approx(600, rel=0.01)
    big = default_timeout(617_434_112, emulated=False)
    assert 3600 < big < 5400  # 600 MB of weights: about 70 minutes
    assert default_timeout(617_434_112, emulated=True) == pytest.approx(20 * big)
    assert default_timeout(500_000, emulated=True) > 3 * 3600  # a tiny model's 20-40 s emulated probe is far below


def test_the_plan_takes_the_default_unless_timeout_is_given(tmp_path, listing):
    import shutil

    from harness.plan import make_plan
    from harness.request import SearchSpec

    cache = tmp_path / "cache"
    shutil.copytree(listing, cache / "index")
    model = builders.save(builders.residual_norm_model(), tmp_path / "m.onnx")
    np.savez(tmp_path / "m.npz", **builders.residual_norm_inputs())
    base = dict(model=str(model), inputs=tmp_path / "m.npz", from_="1.19.0", to="1.20.0", cache_dir=cache,
                offline=True, results_dir=tmp_path / "res")  # natively: nothing to provision, no probe is made
    assert make_plan(SearchSpec(**base)).job.timeout == pytest.approx(600, rel=0.01)
    assert make_plan(SearchSpec(**base, timeout=42)).job.timeout == 42
