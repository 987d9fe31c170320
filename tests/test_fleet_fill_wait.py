"""How long a worker waits before it looks for another worker's fill again (`FillWait`):
the first look follows the fills it waited for lately, within its floor and ceiling."""

from __future__ import annotations

import pytest

from freshcache._fleet._flight import FillWait


def test_the_first_look_follows_the_fills_waited_for() -> None:
    wait = FillWait()
    assert wait.first() == FillWait.FLOOR  # nothing learnt yet: look again soon
    for _ in range(40):
        wait.took(0.030)
    # 0.8 of the fill time: one look mostly finds the entry, rarely far past it.
    assert 0.8 * 0.029 < wait.first() < 0.8 * 0.030 + 1e-9
    for _ in range(40):
        wait.took(0.010)
    assert 0.8 * 0.010 <= wait.first() < 0.8 * 0.011


def test_one_slow_fill_moves_the_wait_a_fifth_of_the_way_and_never_past_the_ceiling() -> None:
    wait = FillWait()
    for _ in range(40):
        wait.took(0.010)
    settled = wait.average
    wait.took(60.0)  # a fill that waited out a starved machine
    assert wait.average == pytest.approx(settled + 0.2 * (FillWait.CEILING - settled))
    for _ in range(100):
        wait.took(60.0)
    assert wait.first() <= 0.8 * FillWait.CEILING + 1e-9
    for _ in range(100):
        wait.took(0.0)
    assert wait.first() == pytest.approx(FillWait.FLOOR, rel=0.01)
