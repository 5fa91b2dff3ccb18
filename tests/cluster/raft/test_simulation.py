"""Seeded simulations under hypothesis-chosen fault schedules: safety always, liveness after healing.

Every step of every run is checked for election safety, log matching, leader completeness, state
machine safety, committed entries never lost, read-index reads never missing a committed write,
and at most one uncommitted membership change in a leader's log (``SafetyChecker`` and
``Simulation``). Once the faults heal, a leader must be followed by all voters and a new write
acknowledged within a bound of ticks, and every voter must then hold every write that was ever
acknowledged. With spare nodes, voters are added and removed while the faults go on, so a voter
added to replace a removed one must catch up too.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pubmesh_testing.raft_sim import (
    Action,
    ChangeVoters,
    Crash,
    Cut,
    Faults,
    Heal,
    Isolate,
    Pause,
    Reboot,
    Restart,
    Resume,
    SetFaults,
    Simulation,
    Transfer,
    Wipe,
)

LIVENESS_BOUND = 400
"""Ticks (40 election timeouts) for a healed group to elect a leader all follow."""


def actions(size: int, spares: int = 0) -> st.SearchStrategy[Action]:
    nodes = st.sampled_from([f"n{number}" for number in range(1, size + spares + 1)])
    faults = st.builds(
        Faults,
        loss=st.sampled_from([0.0, 0.05, 0.2, 0.5]),
        duplicate=st.sampled_from([0.0, 0.1, 0.3]),
        max_delay=st.integers(0, 12),
    )
    changes = [st.builds(ChangeVoters, nodes)] * 3 if spares else []
    return st.one_of(
        *changes,
        st.builds(Cut, nodes, nodes),
        st.builds(Isolate, nodes),
        st.just(Heal()),
        st.builds(Crash, nodes, st.sampled_from([None, "before-persist", "before-send"])),
        st.builds(Restart, nodes),
        st.builds(Reboot, nodes),
        st.builds(Pause, nodes),
        st.just(Resume()),
        st.builds(Wipe, nodes),
        st.builds(SetFaults, faults),
        st.builds(Transfer, nodes),
    )


@st.composite
def scenarios(
    draw: st.DrawFn, max_actions: int, spares: tuple[int, ...] = (0,)
) -> tuple[Simulation, list[tuple[Action, int]]]:
    size = draw(st.sampled_from([3, 5]))
    extra = draw(st.sampled_from(spares))
    sim = Simulation(
        size,
        draw(st.integers(0, 2**32)),
        compact_every=draw(st.sampled_from([0, 5, 17])),
        spares=extra,
    )
    schedule = draw(st.lists(st.tuples(actions(size, extra), st.integers(1, 40)), max_size=max_actions))
    return sim, schedule


def busy(sim: Simulation, ticks: int) -> None:
    """Clients write on about half the ticks and read on a fifth of them."""
    for _ in range(ticks):
        if sim.rng.random() < 0.5:
            sim.propose()
        if sim.rng.random() < 0.2:
            sim.read()
        sim.step()


def play(sim: Simulation, schedule: list[tuple[Action, int]]) -> None:
    for action, ticks in schedule:
        sim.apply(action)
        busy(sim, ticks)
    heal_and_check(sim)


def heal_and_check(sim: Simulation) -> None:
    sim.heal()
    sim.wait_until(sim.converged, within=LIVENESS_BOUND)
    sim.commit_one(within=LIVENESS_BOUND)
    sim.wait_until(sim.converged, within=LIVENESS_BOUND)
    for node in sim.members():
        missing = {i: d for i, d in sim.acked.items() if node.commands.get(i) != d}
        assert not missing, f"{node.id} lacks acknowledged writes {missing}"


@settings(max_examples=20)
@given(scenarios(max_actions=12))
def test_safe_under_faults_and_live_after_healing(
    scenario: tuple[Simulation, list[tuple[Action, int]]],
) -> None:
    play(*scenario)


@settings(max_examples=20)
@given(scenarios(max_actions=12, spares=(1, 2)))
def test_membership_changes_under_faults_stay_safe_and_voters_catch_up(
    scenario: tuple[Simulation, list[tuple[Action, int]]],
) -> None:
    play(*scenario)


def storm(
    size: int,
    seed: int,
    compact_every: int,
    rate: float,
    ticks: int,
    *,
    spares: int = 0,
    guards: tuple[bool, bool] = (True, True),
) -> None:
    """A fault on about ``rate`` of the ticks, drawn by the simulation from ``seed``; with spare
    nodes, a membership change on about a tenth of the ticks as well. ``guards``: whether pre-vote
    and check-quorum are on."""
    pre_vote, check_quorum = guards
    sim = Simulation(
        size,
        seed,
        compact_every=compact_every,
        spares=spares,
        pre_vote=pre_vote,
        check_quorum=check_quorum,
    )
    for _ in range(ticks):
        if sim.rng.random() < rate:
            sim.apply(sim.random_action())
        if spares and sim.rng.random() < 0.1:
            sim.change(sim.rng.choice(sorted(sim.nodes)))
        busy(sim, 1)
    heal_and_check(sim)


@settings(max_examples=8)
@given(
    st.sampled_from([3, 5]),
    st.integers(0, 2**32),
    st.sampled_from([0, 5, 17]),
    st.sampled_from([0.05, 0.1, 0.2]),
)
def test_safe_and_live_through_a_storm_of_faults(
    size: int, seed: int, compact_every: int, rate: float
) -> None:
    storm(size, seed, compact_every, rate, ticks=300)


@settings(max_examples=8)
@given(
    st.sampled_from([3, 5]),
    st.integers(0, 2**32),
    st.sampled_from([0, 5, 17]),
    st.sampled_from([0.05, 0.1, 0.2]),
    st.sampled_from([1, 2]),
    st.tuples(st.booleans(), st.booleans()),
)
def test_membership_changes_through_a_storm_of_faults(
    size: int, seed: int, compact_every: int, rate: float, spares: int, guards: tuple[bool, bool]
) -> None:
    storm(size, seed, compact_every, rate, ticks=300, spares=spares, guards=guards)


@pytest.mark.slow
@pytest.mark.timeout(900)
@settings(max_examples=100)
@given(scenarios(max_actions=40, spares=(0, 1, 2)))
def test_soak_schedules(scenario: tuple[Simulation, list[tuple[Action, int]]]) -> None:
    play(*scenario)


@pytest.mark.slow
@pytest.mark.timeout(900)
@settings(max_examples=100)
@given(
    st.sampled_from([3, 5]),
    st.integers(0, 2**32),
    st.sampled_from([0, 5, 17]),
    st.sampled_from([0.05, 0.1, 0.2, 0.3]),
)
def test_soak_storms(size: int, seed: int, compact_every: int, rate: float) -> None:
    storm(size, seed, compact_every, rate, ticks=1000, spares=size % 4)


@pytest.mark.parametrize("seed", range(3))
def test_a_fixed_seed_replays_exactly(seed: int) -> None:
    def run() -> tuple[int, int, dict[int, bytes]]:
        sim = Simulation(5, seed, compact_every=5)
        sim.apply(SetFaults(Faults(loss=0.2, duplicate=0.2, max_delay=5)))
        for _ in range(200):
            sim.propose()
            sim.step()
        leader = sim.leader()
        return sim.now, leader.term if leader else -1, dict(sim.acked)

    assert run() == run()
