"""Where one message goes: the forwarding rules of a route mesh joined by gateways.

A pure function of where the message came from, who matched locally and which links lead to
interest. It decides, and the caller carries out:

* a message from a client (or any local publisher) reaches local subscribers, every route with
  interest and every gateway with interest, one copy per link;
* a message from a route reaches local subscribers only: routes form a full mesh, so the sender
  already sent a copy to every node that wanted one, and forwarding it again would loop;
* a message from a gateway reaches local subscribers and routes (the rest of this cluster), never
  another gateway.

Each queue group receives each message once. A client's message picks the member at random across
the whole cluster, weighted by member count, so a node with ten members takes ten times the share of
a node with one. A routed message serves only the groups its sender named, from local members. A
group with a member anywhere in the cluster is served inside it; only a group known solely across
gateways is sent to one remote cluster, the first in the caller's preference order (lowest RTT).
"""

from __future__ import annotations

import random
from collections.abc import Collection, Hashable, Mapping, Sequence
from types import MappingProxyType
from typing import Final, Never, TypeVar, cast

from routing.message import Origin
from routing.remote import EMPTY_MATCH, RemoteMatch
from routing.sublist import SubListResult
from routing.subscription import Subscription

__all__ = ["DeliveryPlan", "plan_delivery"]

L = TypeVar("L", bound=Hashable)

_NO_REMOTE: Final[RemoteMatch[Never]] = EMPTY_MATCH
_NO_LINKS: Final[Mapping[Hashable, tuple[str, ...]]] = MappingProxyType({})
"""The one ``links`` of a message no link gets (empty, so a mapping of any link type)."""


DeliveryPlan = tuple[Sequence[Subscription], Mapping[L, tuple[str, ...]]]
"""What to do with one message: ``(local, links)``.

``local`` are the local subscriptions to deliver to, queue picks included; ``links`` maps each link
that gets one copy to the queue groups the far side must serve (an empty tuple: its plain
subscribers only). A plain tuple, because one is built per message and unpacked at once.
"""


def plan_delivery(
    origin: Origin,
    local: SubListResult,
    rng: random.Random,
    *,
    routes: RemoteMatch[L] = _NO_REMOTE,
    gateways: RemoteMatch[L] = _NO_REMOTE,
    gateway_order: Sequence[L] = (),
    queues: Collection[str] = (),
    exclude: object = None,
) -> DeliveryPlan[L]:
    """Decide the local deliveries and link copies for one message.

    Args:
        origin: where the message came from.
        local: the local match for its subject.
        rng: the source of queue picks (seed it for reproducible runs).
        routes: route interest in its subject (used for client and gateway messages).
        gateways: gateway interest in its subject (used for client messages).
        gateway_order: gateways by preference for queue groups only served remotely; gateways
            not listed come after, in the order interest was learned.
        queues: for a message from a route or gateway, the queue groups its sender asked this
            node to serve; other groups are not served.
        exclude: an owner whose subscriptions must not receive it (a publisher with echo off).
    """
    if origin is not Origin.CLIENT:
        routes = _NO_REMOTE if origin is Origin.ROUTE else routes
        gateways = _NO_REMOTE
    if routes is _NO_REMOTE and gateways is _NO_REMOTE and exclude is None:
        # A single node's everyday cases, kept cheap: no mapping made per message.
        if not local.queues:
            return local.plain, cast("Mapping[L, tuple[str, ...]]", _NO_LINKS)
        if origin is Origin.CLIENT:  # (each group served here: one member picked, as ``_serve``)
            chosen = list(local.plain)
            for group in local.queues:
                if group:
                    chosen.append(group[int(rng.random() * len(group))])
            return chosen, cast("Mapping[L, tuple[str, ...]]", _NO_LINKS)
    plain: Sequence[Subscription] = local.plain
    if exclude is not None and plain:
        plain = [sub for sub in plain if sub.owner is not exclude]
    links: dict[L, tuple[str, ...]] = dict.fromkeys(routes.links, ())
    for link in gateways.links:
        links[link] = ()
    if not local.queues and not routes.queues and not gateways.queues:
        return plain, links

    picked: list[Subscription] = []
    served: set[str] = set()
    named = None if origin is Origin.CLIENT else queues
    for group in local.queues:
        name = group[0].queue
        assert name is not None
        if named is not None and name not in named:
            continue
        served.add(name)
        _serve(name, group, routes.queues.get(name, ()), rng, exclude, picked, links)
    for name, remote in routes.queues.items():
        if name not in served and (named is None or name in named):
            served.add(name)
            _serve(name, (), remote, rng, exclude, picked, links)
    for name, remote in gateways.queues.items():
        if name not in served:
            _add_queue(links, _preferred(remote, gateway_order), name)
    if picked:
        plain = [*plain, *picked]
    return plain, links


def _serve(
    name: str,
    members: Sequence[Subscription],
    remote: Sequence[tuple[L, int]],
    rng: random.Random,
    exclude: object,
    picked: list[Subscription],
    links: dict[L, tuple[str, ...]],
) -> None:
    """Pick one member of a group, weighted: local members count 1, a link counts its weight."""
    if exclude is not None:
        members = [sub for sub in members if sub.owner is not exclude]
    total = len(members)
    for _, weight in remote:
        total += weight
    if not total:
        return
    x = int(rng.random() * total)
    if x < len(members):
        picked.append(members[x])
        return
    x -= len(members)
    for link, weight in remote:
        if x < weight:
            _add_queue(links, link, name)
            return
        x -= weight


def _preferred(remote: Sequence[tuple[L, int]], order: Sequence[L]) -> L:
    candidates = [link for link, _ in remote]
    for link in order:
        if link in candidates:
            return link
    return candidates[0]


def _add_queue(links: dict[L, tuple[str, ...]], link: L, name: str) -> None:
    links[link] = (*links.get(link, ()), name)
