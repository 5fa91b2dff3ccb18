"""Routing-core benchmarks (``make bench``); run by pytest-benchmark, never part of ``make test``.

Datasets follow the issue's targets: 100k subscriptions of 4-6 tokens over a small vocabulary, a
tenth of them with a ``*`` and a twentieth ending in ``>``; remote interest of 100k entries over 5
links. Garbage collection stays on, as in a running server.
"""

import itertools
import random
from collections.abc import Callable, Iterator

import pytest
from pytest_benchmark.fixture import BenchmarkFixture

from routing import GlobPattern, PatternIndex, RemoteInterest, SubList, Subscription
from tests.routing.test_memory import bytes_per_subscription

WORDS = [f"w{i}" for i in range(10)]
N = 100_000


def patterns(rng: random.Random, n: int) -> list[str]:
    out: set[str] = set()
    while len(out) < n:
        tokens = [rng.choice(WORDS) for _ in range(rng.randint(4, 6))]
        if rng.random() < 0.1:
            tokens[rng.randrange(len(tokens))] = "*"
        if rng.random() < 0.05:
            tokens[-1] = ">"
        out.add(".".join(tokens))
    return sorted(out)


def publishes(rng: random.Random, n: int) -> list[str]:
    return [".".join(rng.choice(WORDS) for _ in range(rng.randint(4, 6))) for _ in range(n)]


@pytest.fixture(scope="module")
def subjects() -> list[str]:
    return patterns(random.Random(1), N)


@pytest.fixture(scope="module")
def traffic() -> list[str]:
    return publishes(random.Random(2), 10_000)


def filled(subjects: list[str], *, cache: bool) -> SubList:
    sl = SubList(cache=cache)
    for subject in subjects:
        sl.insert(Subscription(subject))
    return sl


def rotating(items: list[str]) -> Callable[[], tuple[tuple[str], dict[str, object]]]:
    it: Iterator[str] = itertools.cycle(items)
    return lambda: ((next(it),), {})


def test_match_cached(benchmark: BenchmarkFixture, subjects: list[str], traffic: list[str]) -> None:
    sl = filled(subjects, cache=True)
    sl.match(traffic[0])
    benchmark(sl.match, traffic[0])


def test_match_uncached_100k(
    benchmark: BenchmarkFixture, subjects: list[str], traffic: list[str]
) -> None:
    sl = filled(subjects, cache=False)
    benchmark.pedantic(sl.match, setup=rotating(traffic), rounds=20_000)


def test_insert_into_100k(benchmark: BenchmarkFixture, subjects: list[str]) -> None:
    sl = filled(subjects, cache=True)
    fresh = iter([Subscription(s) for s in patterns(random.Random(3), 30_000)])
    benchmark.pedantic(sl.insert, setup=lambda: ((next(fresh),), {}), rounds=20_000)


def test_remove_from_100k(benchmark: BenchmarkFixture, subjects: list[str]) -> None:
    subs = [Subscription(s) for s in subjects]
    sl = SubList()
    for sub in subs:
        sl.insert(sub)
    order = iter(random.Random(4).sample(subs, 20_000))
    benchmark.pedantic(sl.remove, setup=lambda: ((next(order),), {}), rounds=20_000)


def remote_table(subjects: list[str], links: int, per_link: int) -> RemoteInterest[str]:
    ri: RemoteInterest[str] = RemoteInterest()
    for n in range(links):
        for subject in subjects[n * per_link : (n + 1) * per_link]:
            ri.apply_remote_sub(f"link{n}", "$G", subject)
    return ri


def test_match_remote_100k_over_5_links_cached(
    benchmark: BenchmarkFixture, subjects: list[str], traffic: list[str]
) -> None:
    ri = remote_table(subjects, 5, 20_000)
    ri.match_remote("$G", traffic[0])
    benchmark(ri.match_remote, "$G", traffic[0])


def test_match_remote_100k_over_5_links_uncached(
    benchmark: BenchmarkFixture, subjects: list[str], traffic: list[str]
) -> None:
    ri = remote_table(subjects, 5, 20_000)
    subject = rotating(traffic)
    benchmark.pedantic(lambda s: ri.match_remote("$G", s), setup=subject, rounds=20_000)


@pytest.mark.parametrize("others", [0, 80_000], ids=["others-hold-0", "others-hold-80k"])
def test_drop_20k_link_slice(benchmark: BenchmarkFixture, subjects: list[str], others: int) -> None:
    """The same 20k-entry drop with the other links empty or holding 80k: the times should match."""

    tables: list[RemoteInterest[str]] = []

    def setup() -> tuple[tuple[RemoteInterest[str]], dict[str, object]]:
        tables[:] = [remote_table(subjects, 5 if others else 1, 20_000)]
        return (tables[0],), {}

    benchmark.pedantic(lambda table: table.remove_remote_subs("link0"), setup=setup, rounds=5)


PATTERN_SETS: dict[str, Callable[[int], bytes]] = {
    "none": lambda i: b"",
    "10k-prefixed": lambda i: b"tenant%d.*" % i,
    "10k-suffixed": lambda i: b"*.dev%d" % i,
    "10k-unanchored": lambda i: b"*x%d*" % i,
}


@pytest.mark.parametrize("kind", list(PATTERN_SETS))
def test_pattern_match_10k_non_matching(benchmark: BenchmarkFixture, kind: str) -> None:
    """A publish matched by one pattern among 10k that cannot match it (or none)."""
    index: PatternIndex[int] = PatternIndex()
    if kind != "none":
        for i in range(1, 10_001):
            index.add(PATTERN_SETS[kind](i), i)
    index.add(b"orders.*", 0)
    assert len(benchmark(index.match, b"orders.eu.created")) == 1


def test_pattern_scan_10k_like_redis(benchmark: BenchmarkFixture) -> None:
    """What a publish costs when every pattern is tried, as redis-server does: the baseline."""
    globs = [GlobPattern(b"tenant%d.*" % i) for i in range(10_000)]
    benchmark(lambda: [g for g in globs if g.match(b"orders.eu.created")])


@pytest.mark.parametrize(
    "pattern", [b"orders.eu.created", b"orders.*", b"orders.*.created", b"o?ders.[a-z]*.c*d"]
)
def test_glob_match(benchmark: BenchmarkFixture, pattern: bytes) -> None:
    benchmark(GlobPattern(pattern).match, b"orders.eu.created")


def test_memory_per_subscription(capsys: pytest.CaptureFixture[str]) -> None:
    cases = {
        "5 distinct tokens per subject": lambda i: f"a{i}.b{i}.c{i}.d{i}.e{i}",
        "iot-style (unique 3rd token)": lambda i: f"tenant{i % 50}.region{i % 7}.dev{i}.s{i % 13}.v",
        "10-word vocabulary per level": lambda i: ".".join(f"w{(i // 10**k) % 10}" for k in range(5)),
    }
    with capsys.disabled():
        print("\nmemory per subscription (record + subject + trie, tracemalloc):")
        for name, subject in cases.items():
            print(f"  {name:32s} {bytes_per_subscription(subject, 100_000):6.0f} bytes")
