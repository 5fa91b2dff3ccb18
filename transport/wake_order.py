"""Tasks woken together run in the order they were woken, so connections are served in the order
their input arrived.

trio runs each batch of woken tasks either in order or reversed, at random, on purpose: a program
that depends on the order in which simultaneous events are handled fails early in its tests. A
broker owes its clients more than that. redis-server handles connections in the order their input
reached it, and its clients count on it across connections: a ``PUBLISH`` sent right after another
connection's ``UNSUBSCRIBE`` reaches no subscriber, even when nobody waited for the unsubscribe's
reply. The node's sockets stay armed in an epoll that reports them in the order input reached
them, their readers are woken in that order (``transport.readiness``), and a reader handles its
input before it gives up the loop (``transport.sessions``); only the random reversal stood between
arrival order and handling order.

``keep_wake_order`` turns the reversal off for the whole process. It replaces the random source
trio's run loop draws that decision from (a module global of trio's, read on every pass) with one
that always decides for wake order and is otherwise an ordinary ``random.Random``. It checks first that
trio still has that source and still draws from it the way this relies on; if a trio release has
changed its run loop, it leaves trio alone and logs a warning (the node runs, in trio's order), and
``tests/transport/test_wake_order.py`` fails. It costs nothing per task: the draw it answers
happened anyway. Where hypothesis is loaded (in tests), trio instead sorts each batch by task age and
shuffles it from a seeded source, to replay runs exactly; wake order is just as repeatable, so that
mode is turned off too. Every node calls it when it starts (``node.server.Server.serve``).
"""

from __future__ import annotations

import logging
import random

import trio

__all__ = ["keep_wake_order"]

log = logging.getLogger("pubmesh")

_DRAW = frozenset({"_r", "random", "reverse", "_ALLOW_DETERMINISTIC_SCHEDULING"})
"""Names trio's run loop uses to decide, per batch, whether to reverse it (``if _r.random() < 0.5:
batch.reverse()``)."""


class _InOrder(random.Random):
    """A random source whose ``random()`` always says "reverse" (trio reverses below 0.5): trio
    takes a batch's tasks from its end, so a reversed batch runs in the order it was woken."""

    def random(self) -> float:
        return 0.0


def keep_wake_order() -> bool:
    """Make trio run every batch of woken tasks in the order they were woken (idempotent); False
    if this trio cannot be made to."""
    run = trio._core._run  # (the one place that reaches into trio, see above)
    current = getattr(run, "_r", None)
    if isinstance(current, _InOrder) and not run._ALLOW_DETERMINISTIC_SCHEDULING:
        return True
    loop = getattr(run, "unrolled_run", None)
    names = frozenset(getattr(getattr(loop, "__code__", None), "co_names", ()))
    if not isinstance(current, random.Random) or not names >= _DRAW:
        log.warning(
            "trio %s decides its batch order in a way pubmesh does not know: connections may be"
            " served out of arrival order",
            trio.__version__,
        )
        return False
    run._r = _InOrder()
    setattr(run, "_ALLOW_DETERMINISTIC_SCHEDULING", False)  # noqa: B010 (declared Final there)
    return True
