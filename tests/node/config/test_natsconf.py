"""nats-server's configuration language (node.natsconf): its grammar, includes, variables, and that
no text makes it fail any other way than with a ConfError."""

from __future__ import annotations

import datetime
import string
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.config.natsconf import MAX_BYTES, ConfError, Position, Table, parse, parse_duration, parse_size


def reader(files: Mapping[str, str]) -> Callable[[str], str]:
    """Files from a mapping, as a disk would give them."""

    def read(path: str) -> str:
        if path not in files:
            raise FileNotFoundError(f"no such file: {path}")
        return files[path]

    return read


def test_keys_separators_comments_and_blocks() -> None:
    text = """
    # a comment
    a: 1          // another
    b = two; c three, d:four
    "quoted key": 'raw \\n string'
    nested {
      inner: [1, 2
        3 # comment in an array
      ]
      deeper: { x: yes, y: off }
    }
    compact{ z: 1 }
    empty: {}
    none: []
    """
    assert parse(text) == {
        "a": 1,
        "b": "two",
        "c": "three",
        "d": "four",
        "quoted key": "raw \\n string",
        "nested": {"inner": [1, 2, 3], "deeper": {"x": True, "y": False}},
        "compact": {"z": 1},
        "empty": {},
        "none": [],
    }


def test_values() -> None:
    text = r"""
    listen: 127.0.0.1:4222
    url: nats://h:1
    numbers: [0, -5, 1.5, -0.25, 9223372036854775807]
    sizes: [1K, 1KB, 1KiB, 1ki, 2MB, 2m, 3G, 1gb, 1T, 1P, 1E]
    booleans: [true, FALSE, Yes, no, on, OFF]
    escaped: "tab\there \"quoted\" back\\slash \x41"
    starts_with_digit: 1h30m
    when: 2026-11-23T12:00:00Z
    bcrypt: $2a$11$abcdefghijklmnop
    """
    table = parse(text)
    assert table["listen"] == "127.0.0.1:4222"
    assert table["url"] == "nats://h:1"
    assert table["numbers"] == [0, -5, 1.5, -0.25, 2**63 - 1]
    assert table["sizes"] == [
        1000, 1024, 1024, 1024, 2 * 1024**2, 2 * 1000**2, 3 * 1000**3, 1024**3,
        1000**4, 1000**5, 1000**6,
    ]  # fmt: skip
    assert table["booleans"] == [True, False, True, False, True, False]
    assert table["escaped"] == 'tab\there "quoted" back\\slash A'
    assert table["starts_with_digit"] == "1h30m"
    assert table["when"] == datetime.datetime(2026, 11, 23, 12, tzinfo=datetime.UTC)
    assert table["bcrypt"] == "$2a$11$abcdefghijklmnop"
    assert parse("text: (\n  line one\n  x: ) \n)\nnext: 1") == {
        "text": "\n  line one\n  x: ) ",
        "next": 1,
    }


def test_a_document_in_braces() -> None:
    assert parse("{\n  a: 1\n  b: [x]\n}\n") == {"a": 1, "b": ["x"]}


def test_every_key_knows_its_line() -> None:
    table = parse("a: 1\n\nblock {\n  b: 2\n}\n", file="main.conf")
    assert table.positions["a"] == Position("main.conf", 1)
    assert table.positions["block"] == Position("main.conf", 3)
    assert table["block"].positions["b"] == Position("main.conf", 4)
    assert str(table["block"].positions["b"]) == "main.conf:4"


def test_variables_resolve_in_enclosing_maps_then_the_environment() -> None:
    text = """
    PASS: "outer"
    TOKEN: $FROM_ENV
    block {
      PASS: "inner"
      user: { password: $PASS }
      list: [$PASS, $NUMBER]
    }
    after: $PASS
    """
    table = parse(text, env={"FROM_ENV": "t0k3n", "NUMBER": "2KB"})
    assert table["TOKEN"] == "t0k3n"
    assert table["block"]["user"] == {"password": "inner"}
    assert table["block"]["list"] == ["inner", 2048]  # the environment's text is read as a value
    assert table["after"] == "outer"
    assert table.variables == {"PASS"}
    assert table["block"].variables == {"PASS"}


def test_a_variable_sees_only_what_came_before_it_in_enclosing_maps() -> None:
    with pytest.raises(ConfError, match=r"^c\.conf:2: variable 'LATER' is not defined"):
        parse("a: 1\nb: $LATER\nLATER: 2\n", file="c.conf")
    with pytest.raises(ConfError, match="variable 'X' is not defined"):
        parse("one { X: 1 }\ntwo { y: $X }\n")


def test_an_environment_variable_may_not_refer_to_itself() -> None:
    with pytest.raises(ConfError, match="'A' refers to itself"):
        parse("a: $A", env={"A": "$B", "B": "$A"})
    with pytest.raises(ConfError, match="variable name"):
        parse("a: $")


def test_includes_are_relative_to_the_including_file() -> None:
    files = {
        "/etc/pm/auth.conf": "authorization {\n  include 'users/list.conf'\n}\n",
        "/etc/pm/users/list.conf": "# users\nusers: [{user: a, password: b}]\ninclude more.conf\n",
        "/etc/pm/users/more.conf": "timeout: 3\n",
    }
    table = parse("port: 1\ninclude ./auth.conf\n", file="/etc/pm/main.conf", read=reader(files))
    assert table == {
        "port": 1,
        "authorization": {"users": [{"user": "a", "password": "b"}], "timeout": 3},
    }
    assert table["authorization"].positions["users"] == Position("/etc/pm/users/list.conf", 2)
    assert table["authorization"].positions["timeout"] == Position("/etc/pm/users/more.conf", 1)


def test_what_an_included_file_sets_serves_as_variables_after_it() -> None:
    files = {"/x/secrets.conf": "PASS: 'from-include'\n"}
    table = parse(
        "include secrets.conf\nuser: {password: $PASS}\n", file="/x/m.conf", read=reader(files)
    )
    assert table["user"] == {"password": "from-include"}
    assert table.variables == {"PASS"}


def test_an_included_file_does_not_see_the_includers_variables() -> None:
    files = {"/x/inc.conf": "b: $A\n"}
    with pytest.raises(ConfError, match=r"^/x/inc\.conf:1: variable 'A'"):
        parse("A: 1\ninclude inc.conf\n", file="/x/main.conf", read=reader(files))


@pytest.mark.parametrize(
    ("files", "error"),
    [
        (
            {"/m.conf": "include a.conf", "/a.conf": "include m.conf"},
            "include cycle: /m.conf -> /a.conf -> /m.conf",
        ),
        ({"/m.conf": "include m.conf"}, "include cycle"),
        ({"/m.conf": "x: 1\ninclude missing.conf"}, "^/m.conf:2: cannot read include 'missing.conf'"),
        ({"/m.conf": "include ''"}, "include needs a file name"),
        ({"/m.conf": "include big.conf", "/big.conf": "a: 1\n" * (MAX_BYTES // 4)}, "larger than"),
    ],
)  # fmt: skip
def test_bad_includes(files: dict[str, str], error: str) -> None:
    with pytest.raises(ConfError, match=error):
        parse(files["/m.conf"], file="/m.conf", read=reader(files))


def test_includes_fanning_out_are_bounded_in_bytes() -> None:
    """Each file includes the next twice: 2**20 copies if nothing stopped it."""
    files = {f"/f{n}.conf": f"include f{n + 1}.conf\ninclude f{n + 1}.conf\n" for n in range(20)}
    files["/f20.conf"] = "x: " + "y" * 10_000 + "\n"
    with pytest.raises(ConfError, match="larger than"):
        parse(files["/f0.conf"], file="/f0.conf", read=reader(files))


def test_without_a_reader_nothing_is_included() -> None:
    with pytest.raises(ConfError, match="cannot include"):
        parse("include x.conf")


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('a: 1\nb: "open', "^<config>:2: unterminated string"),
        ("a: 'open", "unterminated string"),
        ('a: "\\q"', "invalid escape 'q'"),
        ('a: "\\x4"', "two hexadecimal digits"),
        ("a: [1, 2", "expected ',' or ']' after an array item, got end of file"),
        ("a: [1 2]", "expected ',' or ']'"),
        ("a: [,]", "expected a value, got ','"),
        ("a {\n b: 1\n", "^<config>:3: unexpected end of file, expected '}'"),
        ("a:\nb: 1", "^<config>:1: expected a value, got new line"),
        ("a: 1 2", "expected a new line, ',' or ';'"),
        ("}", "unexpected '}'"),
        ("a: -x", "expected a number"),
        ("a: 99999999999999999999", "out of range"),
        ("a: 9000000000000000000000000000000000000000000000000000", "out of range"),
        ("a: 10E", "out of range"),
        ("a: 2026-13-01T00:00:00Z", "invalid date"),
        ("a: (\nno end", "unterminated block"),
        ("{ a: 1 } b: 2", "after the closing"),
        ("a: " + "[" * 100, "nested deeper than 64"),
        ("'key", "unterminated quoted key"),
    ],
)
def test_errors_say_where(text: str, error: str) -> None:
    with pytest.raises(ConfError, match=error):
        parse(text)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("2m", 120.0), ("1h30m", 5400.0), ("1.5s", 1.5), ("500ms", 0.5), (".5s", 0.5), ("0", 0.0),
     ("-1s", -1.0), ("1us", 1e-6), ("1µs", 1e-6), ("3ns", 3e-9), ("1m0.5s", 60.5)],
)  # fmt: skip
def test_durations_as_go_reads_them(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


@pytest.mark.parametrize("text", ["", "2", "1x", "s", ".s", "1.5", "2 m", "1h 30m", "-", "1d"])
def test_not_durations(text: str) -> None:
    assert parse_duration(text) is None


def test_sizes() -> None:
    assert [parse_size(t) for t in ("64KB", "64KiB", "64k", "2mb", " 1G ")] == [
        65536, 65536, 64000, 2 * 1024**2, 1000**3,
    ]  # fmt: skip
    assert [parse_size(t) for t in ("64", "64X", "KB", "1.5MB", "")] == [None] * 5


# -- generated documents render and parse back

BOOLEANS = ("true", "false", "yes", "no", "on", "off")
WORD = st.text(string.ascii_letters + "_", min_size=1, max_size=8).filter(
    lambda w: w.lower() not in ("include", *BOOLEANS)
)
KEY = WORD | st.text(st.characters(blacklist_characters="\"'"), max_size=8).map(lambda k: f"\x00{k}")
"""A word, or (marked with NUL, dropped when rendered) any text to be quoted."""
SCALARS = (
    st.integers(-(2**63), 2**63 - 1)
    | st.booleans()
    | st.integers(-(10**9), 10**9).map(lambda n: n / 1000)
    | st.text(max_size=12)
    | WORD
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEY, inner, max_size=4),
    max_leaves=20,
)


Draw = Callable[[st.SearchStrategy[str]], str]


def render_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r") + '"'


def render_key(key: str, draw: Draw) -> str:
    if key.startswith("\x00"):
        return draw(st.sampled_from(['"{}"', "'{}'"])).format(key[1:])
    return key


def render(value: Any, draw: Draw) -> str:
    """``value`` in the language, spaced, separated and commented in ways picked by ``draw``."""
    if isinstance(value, bool):
        return draw(st.sampled_from(["true", "yes", "on"] if value else ["false", "no", "off"]))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, str):
        bare = all(c in string.ascii_letters + "_" for c in value) and value.lower() not in BOOLEANS
        if value and bare and draw(st.sampled_from(["bare", "quoted"])) == "bare":
            return value
        return render_string(value)
    if isinstance(value, list):
        items = [render(item, draw) for item in value]
        return (
            "["
            + "".join(item + draw(st.sampled_from([", ", "\n", " ,\n", " # c\n"])) for item in items)
            + "]"
        )
    return "{" + render_entries(value, draw) + "}"


def render_entries(table: dict[str, Any], draw: Draw) -> str:
    out = ["\n"]
    for key, value in table.items():
        separator = draw(st.sampled_from([": ", "=", " = ", " ", "\t:"]))
        end = draw(st.sampled_from(["\n", ",", ";", "; // c\n", " # c\n"]))
        out.append(f"{render_key(key, draw)}{separator}{render(value, draw)}{end}")
    return "".join(out)


def plain(value: Any) -> Any:
    """The value as generated: quoted keys without their marks."""
    if isinstance(value, dict):
        return {k.removeprefix("\x00"): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.dictionaries(KEY, VALUES, max_size=6), st.data())
def test_generated_documents_parse_back(document: dict[str, Any], data: st.DataObject) -> None:
    expected = plain(document)
    if len(expected) != len(document):
        return  # two keys the same once unmarked
    text = render_entries(document, data.draw)
    parsed = parse(text)
    assert repr(parsed) == repr(expected)  # repr tells True from 1 and 1.0 from 1


# -- no text makes it fail but with a ConfError

SYNTAX = st.text(alphabet=" \t\n\r{}[]()=:;,#/\\\"'$-.0123456789kKbBiIeEmMxyzno_include", max_size=200)
FILES = {
    "/c/main.conf": "include a.conf\nv: $V\n",
    "/c/a.conf": "a: {b: [1, 2KB, 'x']}\ninclude main.conf\n",
    "/c/x": "x: 1\n",
}
ENV = {"V": "[1, {a: $W}]", "W": "yes", "LOOP": "$LOOP", "BAD": "'"}


def parses_or_refuses(text: str) -> None:
    try:
        table: Table | ConfError = parse(text, file="/c/main.conf", read=reader(FILES), env=ENV)
    except ConfError as exc:
        table = exc
    assert isinstance(table, Table) or str(table).startswith(f"{table.where}: ")


@pytest.mark.slow
@settings(max_examples=1000, deadline=None)
@given(SYNTAX)
def test_text_made_of_syntax_only_ever_fails_as_a_conf_error(text: str) -> None:
    parses_or_refuses(text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_only_ever_fails_as_a_conf_error(text: str) -> None:
    parses_or_refuses(text)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [*"x:1{}[],\n#'\"$", "$V", "$LOOP", "$BAD", "include x", "include main.conf", " "]
        ),
        max_size=60,
    )
)
def test_token_soup_only_ever_fails_as_a_conf_error(tokens: list[str]) -> None:
    parses_or_refuses("".join(tokens))


def test_every_prefix_of_a_document_parses_or_is_refused() -> None:
    """A file cut short at any character (a half-written file, a truncated upload)."""
    text = (
        "a: 1\nb { c: [1, 'two', \"th\\x72ee\", {d: $a}] }\ninclude x\n"
        "e: (\nblock\n)\nf: 2026-01-01T00:00:00Z // done\n"
    )
    for end in range(len(text) + 1):
        parses_or_refuses(text[:end])


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 10**6), st.integers(0, 999), st.sampled_from(sorted(UNITS))),
        min_size=1,
        max_size=4,
    )
)
def test_generated_durations_add_up(parts: list[tuple[int, int, str]]) -> None:
    text = "".join(f"{whole}.{fraction:03d}{unit}" for whole, fraction, unit in parts)
    expected = sum((whole + fraction / 1000) * UNITS[unit] for whole, fraction, unit in parts)
    assert parse_duration(text) == pytest.approx(expected)
    assert parse_duration("-" + text) == pytest.approx(-expected)
