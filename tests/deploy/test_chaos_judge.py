"""How the chaos tool judges convergence from monitoring documents (no Docker needed): what each
node says it holds from its route peers and gateways is compared with what those peers hold."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from deploy.chaos import Node, disagreements

Sub = tuple[str, str, str]


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


def documents() -> dict[str, dict[str, dict[str, Any]]]:
    """Documents of a converged super-cluster: east (east1, east2) and west (west1)."""
    docs: dict[str, dict[str, dict[str, Any]]] = {}
    for cluster, members in CLUSTERS.items():
        for name in members:
            peers = [p for p in members if p != name]
            routes = [{"remote_name": p, "subscriptions_list_detail": detail(LOCAL[p])} for p in peers]
            routes += [{"remote_name": p} for p in peers]  # a pooled connection that carried none
            outbound = {}
            for other, others in CLUSTERS.items():
                if other != cluster:
                    wanted = set().union(*(LOCAL[o] for o in others))
                    accounts = [{"name": "$G", "subscriptions_list_detail": detail(wanted)}]
                    outbound[other] = {"accounts": accounts}
            docs[name] = {
                "/subsz": {"subscriptions_list": detail(LOCAL[name])},
                "/routez": {"routes": routes},
                "/gatewayz": {"outbound_gateways": outbound},
            }
    return docs


def judge(docs: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    return disagreements([Documented(name, docs[name]) for name in sorted(docs)])


def test_a_converged_deployment_has_nothing_to_say() -> None:
    assert judge(documents()) == []


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


@pytest.mark.parametrize(
    ("broken", "problem"),
    [
        (lambda d: d["east2"]["/routez"].update(routes=[]), "east2 routes to [], not ['east1']"),
        (lambda d: d["east1"]["/gatewayz"].update(outbound_gateways={}), "east1 has no gateway to west"),
    ],
)
def test_missing_links_are_disagreements(broken: Any, problem: str) -> None:
    docs = copy.deepcopy(documents())
    broken(docs)
    assert judge(docs) == [problem]
