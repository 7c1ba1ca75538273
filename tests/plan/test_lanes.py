"""What a task takes on a lane, and the lanes' latency estimate, against hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from sparseloom.plan.lanes import Option, lane_choice, laneable
from sparseloom.profile.table import ProfileTable
from tests.plan.tables import task_profile


def _option(chain_ms: float, placement: tuple[int, ...], served: float | None = None
            ) -> Option:
    work = np.zeros(2)
    for processor in placement:
        work[processor] += chain_ms / len(placement)
    return Option(0, placement, work, chain_ms, work.copy(), work > 0, chain_ms / 2, served)


def test_each_task_takes_its_fastest_whole_faithful_chain_stretched_by_the_shorter_lanes(
        ) -> None:
    fast_served = _option(1.0, (0, 0), served=0.9)  # bf16 OpenVINO, say: never on a lane
    spanning = _option(2.0, (0, 1))  # over both processors: not a whole chain
    options = [[fast_served, spanning, _option(4.0, (1, 1)), _option(5.0, (0, 0))],
               [_option(0.2, (1, 1))], [_option(0.3, (0, 0))], [_option(0.3, (1, 1))]]
    chosen, latency = lane_choice(options, 2)
    assert [o.chain_ms for o in chosen] == [4.0, 0.2, 0.3, 0.3]
    # By hand, lanes no longer than each: 4 ms → 4 of them (× 2), 0.2 → 1 (× 1),
    # 0.3 → 3 (× 1.5) for both 0.3 ms chains.
    assert latency == pytest.approx([8.0, 0.2, 0.45, 0.45])


def test_no_lanes_when_a_task_has_no_whole_faithful_chain() -> None:
    assert lane_choice([[_option(1.0, (0, 1))], [_option(1.0, (0, 0))]], 2) is None
    assert lane_choice([[_option(1.0, (0, 0), served=0.8)]], 2) is None


def test_lanes_only_over_cpu_processors_of_installed_backends() -> None:
    task = task_profile("x", np.ones((1, 1, 2)), np.array([0.9]))
    assert laneable(ProfileTable("hand", ["ov:CPU", "ort:CPU"], {"x": task}))
    assert not laneable(ProfileTable("hand", ["ov:GPU", "ort:CPU"], {"x": task}))
    assert not laneable(ProfileTable("hand", ["nosuch:CPU", "ort:CPU"], {"x": task}))
