"""Subject validity and the reference matcher, with nats-server's own tables as the cases."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from routing import (
    InvalidSubjectError,
    is_valid_literal_subject,
    is_valid_subject,
    subject_is_literal,
    subject_matches,
    subjects_collide,
    tokenize,
)

# TestSublistValidLiteralSubjects: wildcard characters inside longer tokens are literal.
LITERAL_OK = [
    "foo", "foo*", "foo**", "foo.**", "foo*bar", "foo.*bar", "foo*.bar", "*bar", "foo>",
    "foo>>", "foo.>>", "foo>bar", "foo.>bar", "foo>.bar", ">bar",
]  # fmt: skip
LITERAL_BAD = [".foo", "foo.", "foo..bar", "foo.bar.*", "foo.bar.>", "*", ">"]

# TestSublistValidSubjects.
SUBJECT_OK = ["foo", "foo.bar.*", "foo.bar.>", "*", ">", "foo*", "foo.*bar", ">bar", "a.*.b.>"]
SUBJECT_BAD = [".", ".foo", "foo.", "foo..bar", ">.bar", "foo.>.bar", "", "foo bar", "a.\tb"]


@pytest.mark.parametrize("subject", LITERAL_OK)
def test_valid_literal_subjects(subject: str) -> None:
    assert is_valid_literal_subject(subject)


@pytest.mark.parametrize("subject", LITERAL_BAD)
def test_invalid_literal_subjects(subject: str) -> None:
    assert not is_valid_literal_subject(subject)


@pytest.mark.parametrize("subject", SUBJECT_OK)
def test_valid_subjects(subject: str) -> None:
    assert is_valid_subject(subject)
    assert tokenize(subject) == subject.split(".")


@pytest.mark.parametrize("subject", SUBJECT_BAD)
def test_invalid_subjects(subject: str) -> None:
    assert not is_valid_subject(subject)
    with pytest.raises(InvalidSubjectError):
        tokenize(subject)


@pytest.mark.parametrize(
    ("subject", "literal"),
    [
        ("foo*.bar", True),
        ("*", False),
        (">", False),
        ("foo.*", False),
        ("foo.>", False),
        ("foo.*.>", False),
        ("foo.*.bar", False),
        ("foo.bar.>", False),
    ],
)
def test_subject_is_literal(subject: str, literal: bool) -> None:
    # TestSubjectIsLiteral
    assert subject_is_literal(subject) is literal


@pytest.mark.parametrize(
    ("subject", "pattern", "expected"),
    [
        # TestSublistMatchLiterals
        ("foo", "foo", True),
        ("foo", "bar", False),
        ("foo", "*", True),
        ("foo", ">", True),
        ("foo.bar", ">", True),
        ("foo.bar", "foo.>", True),
        ("foo.bar", "bar.>", False),
        ("stats.test.22", "stats.>", True),
        ("stats.test.22", "stats.*.*", True),
        ("stats.test", "stats.test.*", False),
        ("stats.test.foos", "stats.*", False),
        ("stats.test.foos", "stats.*.*.foos", False),
        ("*bar", "*bar", True),
        ("foo*", "foo*", True),
        ("foo.***.bar", "foo.***.bar", True),
        (">bar", ">bar", True),
        ("foo.>>>.bar", "foo.>>>.bar", True),
        # TestSublistTwoTokenPubMatchSingleTokenSub (bug #18)
        ("foo.bar", "foo", False),
        # `>` needs at least one token; `foo.*.>` at least three.
        ("foo", "foo.>", False),
        ("foo.bar", "foo.*.>", False),
        ("foo.bar.baz", "foo.*.>", True),
        # wildcard tokens in a published subject are matched only by wildcards
        ("a.>", "a.>", True),
        ("a.>", "a.b", False),
        ("a.*", "a.*", True),
        ("a.*", "a.b", False),
        # empty tokens in the subject match nothing, not even `>`
        ("foo..bar", ">", False),
        (".foo", ">", False),
        ("foo.", "foo.>", False),
        # an invalid pattern matches nothing
        ("foo.bar", "foo.>.bar", False),
        ("foo", "", False),
    ],
)
def test_subject_matches_table(subject: str, pattern: str, expected: bool) -> None:
    assert subject_matches(pattern, subject) is expected


TOKENS = st.sampled_from(["a", "b", "c", "*", ">", "foo*", ">x"])


@given(st.lists(TOKENS, min_size=1, max_size=6))
def test_literal_subject_matches_itself(tokens: list[str]) -> None:
    subject = ".".join(tokens)
    if is_valid_literal_subject(subject):
        assert subject_matches(subject, subject)


@given(st.lists(TOKENS, min_size=1, max_size=6), st.lists(TOKENS, min_size=1, max_size=6))
def test_full_wildcard_covers_every_extension(prefix: list[str], tail: list[str]) -> None:
    pattern = ".".join([*prefix, ">"])
    subject = ".".join(prefix + tail)
    if is_valid_subject(pattern):
        assert subject_matches(pattern, subject)
        assert not subject_matches(pattern, ".".join(prefix))


@pytest.mark.parametrize(
    ("a", "b", "collide"),
    [
        # TestSublistSubjectCollide
        ("foo.*", "foo.*.bar.>", False),
        ("foo.*.bar.>", "foo.*", False),
        ("foo.*", "foo.foo", True),
        ("foo.*", "*.foo", True),
        ("foo.bar.>", "*.bar.foo", True),
        ("foo.>", "foo", False),
        (">", "foo", True),
        ("foo.bar", "foo.baz", False),
        ("foo..bar", "foo.*.bar", False),
    ],
)
def test_subjects_collide(a: str, b: str, collide: bool) -> None:
    assert subjects_collide(a, b) is collide
    assert subjects_collide(b, a) is collide


@given(
    st.lists(TOKENS, min_size=1, max_size=4),
    st.lists(TOKENS, min_size=1, max_size=4),
    st.lists(st.sampled_from(["a", "b", "c", "foo*"]), min_size=1, max_size=5),
)
def test_a_subject_matching_both_means_they_collide(a: list[str], b: list[str], s: list[str]) -> None:
    pa, pb, subject = ".".join(a), ".".join(b), ".".join(s)
    if subject_matches(pa, subject) and subject_matches(pb, subject):
        assert subjects_collide(pa, pb)
