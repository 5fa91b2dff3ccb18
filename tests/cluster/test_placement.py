"""Hash slots as Redis Cluster computes them, and replica-group layouts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster.placement import SLOTS, hash_slot, layout


def _crc16_xmodem(data: bytes) -> int:
    """CRC16/XMODEM bit by bit (polynomial 0x1021, initial 0), independent of the module's."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def test_crc16_check_value() -> None:
    assert _crc16_xmodem(b"123456789") == 0x31C3
    assert hash_slot(b"123456789") == 0x31C3 & (SLOTS - 1)


@pytest.mark.parametrize(
    ("key", "slot"),
    [
        (b"somekey", 11058),  # CLUSTER KEYSLOT's documented examples
        (b"foo{hash_tag}", 2515),
        (b"hash_tag", 2515),
        (b"foo", 12182),
        (b"bar", 5061),
        (b"", 0),
    ],
)
def test_known_slots(key: bytes, slot: int) -> None:
    assert hash_slot(key) == slot


def test_hash_tag_rules() -> None:
    assert hash_slot(b"{user1000}.following") == hash_slot(b"{user1000}.followers")
    assert hash_slot(b"foo{}{bar}") == _crc16_xmodem(b"foo{}{bar}") % SLOTS  # empty tag: whole key
    assert hash_slot(b"foo{{bar}}zap") == hash_slot(b"{bar")  # from the first { to the first }
    assert hash_slot(b"foo{bar}{zap}") == hash_slot(b"bar")  # the first tag only
    assert hash_slot(b"foo{bar") == _crc16_xmodem(b"foo{bar") % SLOTS  # no closing brace
    assert hash_slot(b"foo}bar{") == _crc16_xmodem(b"foo}bar{") % SLOTS


def _reference_slot(key: bytes) -> int:
    """keyHashSlot's rules, written out as a loop."""
    s = next((i for i, b in enumerate(key) if b == ord("{")), len(key))
    if s == len(key):
        return _crc16_xmodem(key) % SLOTS
    e = next((i for i in range(s + 1, len(key)) if key[i] == ord("}")), len(key))
    if e == len(key) or e == s + 1:
        return _crc16_xmodem(key) % SLOTS
    return _crc16_xmodem(key[s + 1 : e]) % SLOTS


braced = st.lists(st.sampled_from([b"{", b"}", b"a", b"b", b"\x00", b"\xff"]), max_size=12).map(b"".join)


@given(st.one_of(st.binary(max_size=40), braced))
def test_slot_matches_reference(key: bytes) -> None:
    assert hash_slot(key) == _reference_slot(key)
    assert 0 <= hash_slot(key) < SLOTS


@given(st.binary(min_size=1, max_size=10), st.binary(max_size=10), st.binary(max_size=10))
def test_tag_keeps_keys_together(tag: bytes, before: bytes, after: bytes) -> None:
    if b"}" in tag or b"{" in before:
        return
    assert hash_slot(before + b"{" + tag + b"}" + after) == hash_slot(tag)


names = st.lists(st.text("abcdefgh", min_size=1, max_size=3), min_size=1, max_size=7, unique=True)


@given(names, st.data())
def test_layout_covers_every_slot_once(members: list[str], data: st.DataObject) -> None:
    replicas = data.draw(st.integers(1, len(members)))
    plan = layout(members, replicas)
    assert plan.groups[0].first == 0
    assert plan.groups[-1].end == SLOTS
    for before, after in zip(plan.groups, plan.groups[1:], strict=False):
        assert before.end == after.first
    for group in plan.groups:
        assert len(set(group.voters)) == replicas
        assert set(group.voters) <= set(members)
    for slot in [*data.draw(st.lists(st.integers(0, SLOTS - 1), max_size=20)), 0, SLOTS - 1]:
        group = plan.group_of_slot(slot)
        assert group.first <= slot < group.end
    load = {m: sum(m in g.voters for g in plan.groups) for m in members}
    assert set(load.values()) == {replicas}  # every member holds the same number of groups


@given(names, st.data())
def test_layout_is_a_function_of_its_configuration(members: list[str], data: st.DataObject) -> None:
    replicas = data.draw(st.integers(1, len(members)))
    plan = layout(members, replicas)
    assert layout(list(members), replicas) == plan
    other = layout(members[::-1], replicas) if len(members) > 1 else layout([*members, "z"], 1)
    if other.groups != plan.groups:
        assert other.fingerprint != plan.fingerprint
        assert not {g.name for g in other.groups} & {g.name for g in plan.groups}
        assert "fingerprint" in (plan.refusal(other.groups[0].name) or "")
    assert plan.refusal(plan.groups[0].name) is None
    assert plan.refusal("some-other-group") is None


def test_layout_rejects_bad_configuration() -> None:
    for members, replicas in [([], 1), (["a", "a"], 1), (["a", ""], 1), (["a", "b"], 3), (["a"], 0)]:
        with pytest.raises(ValueError, match=r"members|replicas"):
            layout(members, replicas)


def test_three_members_three_replicas() -> None:
    plan = layout(["a", "b", "c"], 3)
    assert [(g.first, g.end) for g in plan.groups] == [(0, 5461), (5461, 10922), (10922, 16384)]
    assert [g.voters for g in plan.groups] == [("a", "b", "c"), ("b", "c", "a"), ("c", "a", "b")]
    assert plan.group_of(b"somekey").name == plan.groups[2].name
