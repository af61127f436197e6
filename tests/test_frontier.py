"""The time/memory frontier and the pick under a memory limit, on made-up cost tables (no data)."""
import pytest

from fourdb.engine.frontier import Strategy, pareto, pick
from fourdb.errors import SettingError

TABLE = [
    Strategy("online", 1, 1, 10.0, 500.0),
    Strategy("online", 1, 4, 10.0, 530.0),  # as fast as the one above, more memory: dominated
    Strategy("online", 2, 1, 6.0, 600.0),
    Strategy("online", 4, 4, 6.5, 700.0),  # slower and bigger than workers=2: dominated
    Strategy("offline", 1, 1, 2.0, 3000.0),
    Strategy("offline", 1, 4, 2.0, 3000.0),  # an exact tie: the first listed stays
]


def test_the_frontier_is_every_strategy_no_other_beats_fastest_first():
    assert pareto(TABLE) == [TABLE[4], TABLE[2], TABLE[0]]
    assert pareto([TABLE[0]]) == [TABLE[0]]


def test_the_pick_is_the_fastest_or_smallest_within_the_limit():
    assert pick(TABLE) == TABLE[4]
    assert pick(TABLE, "memory") == TABLE[0]
    assert pick(TABLE, "time", memory_limit_gb=1.0) == TABLE[2]  # offline needs ~2.9 GB
    assert pick(TABLE, "time", memory_limit_gb=0.5) == TABLE[0]  # 512 MB: only the smallest
    assert pick(TABLE, "memory", memory_limit_gb=8) == TABLE[0]


def test_a_limit_no_strategy_meets_is_one_line_naming_the_smallest():
    with pytest.raises(SettingError) as err:
        pick(TABLE, "time", memory_limit_gb=0.25)
    msg = str(err.value)
    assert "\n" not in msg and "online workers=1 prefetch=1" in msg and "0.49 GB" in msg, msg
