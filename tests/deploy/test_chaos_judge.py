"""How the chaos tool judges convergence from monitoring documents (no Docker needed): what each
node says it holds from its route peers and gateways is compared with what those peers hold, each
outbound gateway is paired with its inbound end, and both ends of every link must be fresh."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from deploy.chaos import Node, disagreements, go_seconds
from deploy.chaos_streams import Writes, replica_problems

Sub = tuple[str, str, str]
NOW = "2026-11-23T15:00:10.5Z"
RECENT = "2026-11-23T15:00:10.123456789Z"
LONG_AGO = "2026-11-23T15:00:08Z"


class Documented(Node):
    """A node whose monitoring endpoints answer with the documents given."""

    def __init__(self, service: str, docs: dict[str, dict[str, Any]]) -> None:
        super().__init__(service, service.rstrip("0123456789"), service, 0, 0)
        self.docs = docs

    def get(self, path: str) -> dict[str, Any]:
        return self.docs[path.split("?")[0]]


def detail(subs: set[Sub]) -> list[dict[str, str]]:
    return [{"account": a, "subject": s} | ({"qgroup": q} if q else {}) for a, s, q in sorted(subs)]


LOCAL: dict[str, set[Sub]] = {
    "east1": {("$G", "orders.>", "")},
    "east2": {("$G", "jobs", "workers"), ("$G", "orders.>", "")},
    "west1": {("$G", "audit.*", "")},
}
CLUSTERS = {"east": ["east1", "east2"], "west": ["west1"]}
DIALS = {"east1": "west1", "east2": "west1", "west1": "east2"}
"""Where each node's outbound gateway goes."""


GROUP = {"name": "keys-0-abc", "leader": "east1", "recovering": False, "disk_error": ""}
"""The one replica group of east's nodes, as /raftz shows it."""


def sid(name: str) -> str:
    return f"ID-{name}"


def conn(name: str) -> dict[str, str]:
    return {"name": sid(name), "last_activity": RECENT}


def documents() -> dict[str, dict[str, dict[str, Any]]]:
    """Documents of a converged super-cluster: east (east1, east2) and west (west1), pools of 2."""
    docs: dict[str, dict[str, dict[str, Any]]] = {}
    for cluster, members in CLUSTERS.items():
        for name in members:
            peers = [p for p in members if p != name]
            routes = [
                {
                    "remote_name": p,
                    "last_activity": RECENT,
                    "subscriptions_list_detail": detail(LOCAL[p]),
                }
                for p in peers
            ]
            routes += [{"remote_name": p, "last_activity": RECENT} for p in peers]  # (carried none)
            outbound = {}
            for other, others in CLUSTERS.items():
                if other != cluster:
                    wanted = set().union(*(LOCAL[o] for o in others))
                    accounts = [{"name": "$G", "subscriptions_list_detail": detail(wanted)}]
                    outbound[other] = {"connection": conn(DIALS[name]), "accounts": accounts}
            inbound: dict[str, list[dict[str, Any]]] = {}
            for dialer, target in DIALS.items():
                if target == name:
                    inbound.setdefault(dialer.rstrip("12"), []).append({"connection": conn(dialer)})
            docs[name] = {
                "/subsz": {"subscriptions_list": detail(LOCAL[name])},
                "/varz": {"cluster": {"pool_size": 2}},
                "/raftz": {"groups": [GROUP] if cluster == "east" else []},
                "/routez": {"server_id": sid(name), "now": NOW, "routes": routes},
                "/gatewayz": {
                    "server_id": sid(name),
                    "now": NOW,
                    "outbound_gateways": outbound,
                    "inbound_gateways": inbound,
                },
            }
    return docs


def judge(docs: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    return disagreements([Documented(name, docs[name]) for name in sorted(docs)])


def test_a_converged_deployment_has_nothing_to_say() -> None:
    assert judge(documents()) == []


def test_go_times_are_read_to_the_nanosecond_place_given() -> None:
    assert go_seconds(NOW) - go_seconds(LONG_AGO) == pytest.approx(2.5)
    assert go_seconds(RECENT) - go_seconds(LONG_AGO) == pytest.approx(2.123456789)
    with pytest.raises(ValueError, match="not a Go time"):
        go_seconds("yesterday")


def test_stale_route_interest_is_a_disagreement() -> None:
    docs = documents()
    docs["east1"]["/routez"]["routes"][0]["subscriptions_list_detail"].append(
        {"account": "$G", "subject": "gone"}
    )
    assert judge(docs) == ["east1 holds 3 entries from east2, which has 2"]


def test_missing_gateway_interest_is_a_disagreement() -> None:
    docs = documents()
    docs["west1"]["/gatewayz"]["outbound_gateways"]["east"]["accounts"] = []
    assert judge(docs) == ["west1 sees 0 entries from east, which has 2"]


def test_a_short_pool_is_a_disagreement() -> None:
    docs = documents()
    docs["east1"]["/routez"]["routes"].pop()
    assert judge(docs) == ["east1 has 1 of 2 pooled routes to east2"]


def test_an_outbound_gateway_its_far_end_has_dropped_is_a_disagreement() -> None:
    """The shape of a half-dead link after a partition: the dialer still holds the link and the
    interest that came over it, but the node it dialed has closed its end, so whatever the dialer
    sends on it is lost."""
    docs = documents()
    docs["east2"]["/gatewayz"]["inbound_gateways"] = {}
    assert judge(docs) == ["east2 has no inbound gateway from west1, which uses one"]


def test_a_gateway_heard_one_way_only_is_a_disagreement() -> None:
    """Both ends still hold the link and the dialer hears the far end (pings, interest), but the far
    end has heard nothing from the dialer for longer than a few pings: the dialer's messages are not
    getting through."""
    docs = documents()
    docs["east2"]["/gatewayz"]["inbound_gateways"]["west"][0]["connection"]["last_activity"] = LONG_AGO
    assert judge(docs) == ["east2's gateway from west1 has heard nothing for 2.5 s"]


def test_an_inbound_gateway_its_dialer_no_longer_uses_is_a_disagreement() -> None:
    docs = documents()
    docs["east1"]["/gatewayz"]["inbound_gateways"]["west"] = [{"connection": conn("west1")}]
    assert judge(docs) == ["east1 holds an inbound gateway from west1, which no longer uses it"]


def test_a_silent_route_is_a_disagreement() -> None:
    docs = documents()
    docs["east2"]["/routez"]["routes"][1]["last_activity"] = LONG_AGO
    assert judge(docs) == ["east2's route to east1 has heard nothing for 2.5 s"]


@pytest.mark.parametrize(
    ("broken", "problems"),
    [
        (lambda d: d["east2"]["/routez"].update(routes=[]), ["east2 routes to [], not ['east1']"]),
        (
            lambda d: d["east1"]["/gatewayz"].update(outbound_gateways={}),
            [
                "east1 has no gateway to west",
                "west1 holds an inbound gateway from east1, which no longer uses it",
            ],
        ),
    ],
)
def test_missing_links_are_disagreements(broken: Any, problems: list[str]) -> None:
    docs = copy.deepcopy(documents())
    broken(docs)
    assert judge(docs) == problems


def test_replica_groups_without_one_leader_or_with_a_member_recovering_or_unable_to_save_disagree() -> (
    None
):
    docs = documents()
    docs["east2"]["/raftz"]["groups"] = [GROUP | {"leader": "east2"}]
    assert judge(docs) == ["group keys-0-abc has no leader all its members name: ['east1', 'east2']"]
    docs = documents()
    docs["east2"]["/raftz"]["groups"] = [GROUP | {"recovering": True}]
    assert judge(docs) == ["east2 recovers its replica of keys-0-abc"]
    docs = documents()
    docs["east2"]["/raftz"]["groups"] = [GROUP | {"disk_error": "No space left on device"}]
    assert judge(docs) == ["east2 cannot save keys-0-abc: No space left on device"]


S = b"chaos:{r-0}"
A1, A2, B1 = (b"1-0", b"east1", b"1"), (b"1-1", b"east1", b"3"), (b"2-0", b"east2", b"2")
"""Entries: (ID, writer, sequence number)."""


def written(
    *acked: tuple[bytes, bytes, bytes], unknown: tuple[bytes, bytes] = (b"east2", b"9")
) -> Writes:
    sent = {(writer, seq) for _, writer, seq in acked} | {unknown}
    return Writes({S: list(acked)}, 1, sent)


def test_replicas_holding_every_acknowledged_write_once_are_fine() -> None:
    unknown_made = (b"3-0", b"east2", b"9")  # (a write whose answer was lost may be there)
    held = {node: {S: [A1, B1, unknown_made, A2]} for node in ("east1", "east2", "east3")}
    assert replica_problems(held, written(A1, B1, A2)) == []


def test_lost_duplicated_renumbered_or_invented_entries_and_replicas_that_differ() -> None:
    writes = written(A1, B1, A2)
    held = {
        "east1": {S: [A1, B1, A2]},
        "east2": {S: [A1, B1, B1, A2]},  # (twice)
        "east3": {S: [A1, (b"9-9", b"east2", b"2"), (b"9-10", b"west1", b"1")]},
    }
    problems = replica_problems(held, writes)
    assert problems == [
        "chaos:{r-0}: east2's replica differs from east1's (4 and 3 entries)",
        "chaos:{r-0}: east3's replica differs from east1's (3 and 3 entries)",
        "chaos:{r-0} on east2: twice ['east2#2']",
        "chaos:{r-0} on east3: entries no writer sent ['west1#1']",
        "chaos:{r-0} on east3: 2 acknowledged entries missing or under another ID: "
        "['east2#2 (2-0)', 'east1#3 (1-1)']",
    ]
