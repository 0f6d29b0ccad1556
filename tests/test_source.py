"""Loading YAML and JSON safely: refused content, exact error positions, key-path positions."""

from __future__ import annotations

import json
import os
import textwrap
import tracemalloc
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parplan_gen.inputs import reading, source, yaml_events
from parplan_gen.inputs.defaults import MIB
from parplan_gen.inputs.errors import GraphError, SourceError, SourceRef
from parplan_gen.inputs.key_path import format_path
from parplan_gen.inputs.source import load_document, parse_document


def error_of(text: str, kind: str = "yaml") -> str:
    """The rendered SourceError that parsing `text` (named f.yaml / f.json) raises."""
    with pytest.raises(SourceError) as info:
        parse_document(textwrap.dedent(text), f"f.{kind}", kind)
    return str(info.value)


# --- refused content ----------------------------------------------------------------------------

TAGS = "malformed YAML: YAML tags are not allowed: could not determine a constructor for the tag"
PLAIN = "is not allowed (only maps, lists, strings, numbers, booleans, null)"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: !!python/object/apply:os.system ['echo hi']\n",
         f"f.yaml:1:4: {TAGS} 'tag:yaml.org,2002:python/object/apply:os.system'"),
        ("a: 1\nb: !!python/name:os.system\n",
         f"f.yaml:2:4: {TAGS} 'tag:yaml.org,2002:python/name:os.system'"),
        ("a: 1\nb: !custom value\n", f"f.yaml:2:4: {TAGS} '!custom'"),
        ("a: !!binary aGVsbG8=\n", f"f.yaml:1:1: a: value of type bytes {PLAIN}"),
        ("a:\n  b: !!set {x, y}\n", f"f.yaml:2:3: a.b: value of type set {PLAIN}"),
        ("when: 2024-01-31\n", f"f.yaml:1:1: when: value of type date {PLAIN}"),
    ],
)  # fmt: skip
def test_tags_and_non_plain_values_are_refused(text, expected):
    assert error_of(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: 1\nb:\n  c: 2\n  c: 3\n", 'f.yaml:4:3: malformed YAML: found duplicate key "c"'),
        ("{a: 1, a: 2}\n", 'f.yaml:1:8: malformed YAML: found duplicate key "a"'),
    ],
)
def test_duplicate_keys_in_yaml(text, expected):
    assert error_of(text) == expected


def test_duplicate_keys_in_json():
    assert error_of('{"a": 1,\n "a": 2}', "json") == "f.json: malformed JSON: duplicate key 'a'"
    assert (
        error_of('{"x": {"k": 1, "k": 1}}', "json") == "f.json: malformed JSON: duplicate key 'k'"
    )


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_json_non_finite_constants_are_refused(constant):
    expected = f"f.json: malformed JSON: {constant} is not valid JSON"
    assert error_of(f'{{"flops": {constant}}}', "json") == expected


def test_yaml_nan_is_a_float_left_to_the_schema():
    value = parse_document("a: .nan\n", "f.yaml").data["a"]
    assert value != value  # NaN; graph and rule schemas refuse it with their own message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: [1\n", "f.yaml:2:1: malformed YAML: expected ',' or ']', but got '<stream end>'"),
        ("a: 1\n  b: 2\n", "f.yaml:2:4: malformed YAML: mapping values are not allowed here"),
        ("a: 2020-13-01\n", "f.yaml: malformed YAML: invalid value (month must be in 1..12)"),
        ("a: !!int abc\n", "f.yaml: malformed YAML: invalid value (invalid literal for int() with base 10: 'abc')"),
        ("? [1, 2]\n: x\n", "f.yaml:1:1: mapping key (1, 2) must be a string"),
    ],
)  # fmt: skip
def test_malformed_yaml(text, expected):
    assert error_of(text) == expected


def test_double_colon_in_a_flow_mapping_is_yaml_1_2():
    # libyaml (the C loader) refuses this; YAML 1.2 and the pure-Python loader accept it.
    doc = parse_document("- {id: c, op: Compute::Conv2d}\n- {id: d, op: Add}\n", "f.yaml")
    assert doc.data == [{"id": "c", "op": "Compute::Conv2d"}, {"id": "d", "op": "Add"}]


def test_huge_yaml_integer_is_an_error_not_a_crash():
    assert error_of("a: " + "9" * 5000 + "\n").startswith(
        "f.yaml: malformed YAML: invalid value (Exceeds the limit (4300 digits)"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1,}', "f.json:1:9: malformed JSON: Expecting property name enclosed in double quotes"),
        ("a: 1\n", "f.json:1:1: malformed JSON: Expecting value"),
        ('{\n  "a": [1,\n  ]\n}', "f.json:3:3: malformed JSON: Expecting value"),
    ],
)  # fmt: skip
def test_malformed_json(text, expected):
    assert error_of(text, "json") == expected


# --- bounded resources ---------------------------------------------------------------------------

BOMB = """\
a: &a [x, x, x, x, x, x, x, x, x, x]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]
i: [*h, *h, *h, *h, *h, *h, *h, *h, *h, *h]
"""  # 10^9 strings once expanded


BOMB_ERROR = "aliases and merge keys expand to more than {} values (an alias bomb?)"


def test_alias_bomb_is_refused_where_the_budget_runs_out(monkeypatch):
    monkeypatch.setattr(yaml_events, "MAX_VALUES", 10_000)
    # A list counts itself and its items: *a adds 11 values, *b 111, *c 1,111. a..c add
    # 11 x 10 + 111 x 10 = 1,220; the eighth *c of d (column 36) passes 10,000.
    assert error_of(BOMB) == f"f.yaml:4:36: {BOMB_ERROR.format('10,000')}"


MERGE_BOMB = """\
a: &a {k0: 0, k1: 1, k2: 2, k3: 3, k4: 4, k5: 5, k6: 6, k7: 7, k8: 8, k9: 9}
b: &b {<<: [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a], b: 1}
c: &c {<<: [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b], c: 1}
d: &d {<<: [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c], d: 1}
e: &e {<<: [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d], e: 1}
f: &f {<<: [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e], f: 1}
g: &g {<<: [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f], g: 1}
"""  # each merge lists its source ten times: the YAML library once spent minutes building it


def test_merge_key_bomb_is_refused_before_anything_is_built():
    # A mapping counts itself, its keys and values: *a is 21 values; b adds 210 and is 215
    # (itself, `<<`, the list, `b: 1`), c adds 2,150 and is 2,155, then 21,555 and 215,555.
    # Before f: 239,460 added; the ninth *e of f (column 45) passes 2,000,000.
    assert error_of(MERGE_BOMB) == f"f.yaml:6:45: {BOMB_ERROR.format('2,000,000')}"


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("a: &a [1, *a]\n", "1:11"),
        ("a: &a {b: {c: *a}}\n", "1:15"),
        ("a: &a {<<: *a}\n", "1:12"),
        ("- &a [x]\n- &b [*b, *a]\n", "2:7"),  # an anchor redefined inside itself
    ],
)
def test_an_alias_inside_the_collection_it_names_is_refused(text, where):
    assert error_of(text).startswith(f"f.yaml:{where}: alias *")
    assert error_of(text).endswith("is inside the collection it names (a loop)")


def test_many_values_without_aliases_are_no_bomb(monkeypatch):
    monkeypatch.setattr(yaml_events, "MAX_VALUES", 10)
    text = "nodes:\n" + "".join(f"  - {{id: n{i}, op: X, w: {i}}}\n" for i in range(100))
    assert len(parse_document(text, "f.yaml").data["nodes"]) == 100
    assert parse_document("a: &a [1, 2]\nb: [*a, *a, *a]\n", "f.yaml").data["b"] == [[1, 2]] * 3
    assert error_of("a: &a [1, 2, 3]\nb: [*a, *a, *a]\n") == f"f.yaml:2:13: {BOMB_ERROR.format(10)}"


def test_aliases_below_the_bound_expand():
    doc = parse_document("base: &b {x: 1}\nrows: [*b, *b]\nder:\n  <<: *b\n  y: 2\n", "f.yaml")
    assert doc.data == {"base": {"x": 1}, "rows": [{"x": 1}, {"x": 1}], "der": {"x": 1, "y": 2}}
    assert doc.data["rows"][0] is not doc.data["rows"][1]  # copies: mutating one is harmless


@pytest.mark.parametrize(
    ("text", "where"),
    [("[" * 50_000 + "]" * 50_000, "1:101"), ("- " * 50_000 + "x\n", "1:201"), ("[" * 100_000, "1:101")],
)  # fmt: skip
def test_deep_nesting_is_refused_before_the_c_loader(text, where):
    # The C composer recurses without a limit: 40,000 levels crash the interpreter.
    assert error_of(text) == f"f.yaml:{where}: document nested more than 100 levels deep"


def test_deep_nesting_is_refused_on_the_pure_python_path_too():
    text = "a: {op: Compute::X}\nb: " + "[" * 1_000 + "]" * 1_000 + "\n"
    assert error_of(text) == "f.yaml:2:103: document nested more than 100 levels deep"


def test_nesting_at_the_limit_is_fine():
    assert parse_document("[" * 100 + "]" * 100, "f.yaml").data is not None


def test_deep_json_is_refused():
    assert error_of("[" * 100_000 + "]" * 100_000, "json") == (
        "f.json: malformed JSON: nested too deeply"
    )


# --- files --------------------------------------------------------------------------------------


def test_not_utf8(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_bytes(b"name: ok\nnodes: [caf\xe9]\n")
    with pytest.raises(SourceError) as info:
        load_document(path)
    assert str(info.value) == f"{path}:2: not UTF-8 text (byte 0xe9 at offset 20)"


def test_utf8_bom_is_accepted(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_bytes("\ufeffname: café\n".encode())
    assert load_document(path).data == {"name": "café"}


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(SourceError) as info:
        load_document(tmp_path / "nope.yaml")
    assert str(info.value) == f"{tmp_path / 'nope.yaml'}: file not found"
    with pytest.raises(SourceError) as info:
        load_document(tmp_path)
    assert str(info.value) == f"{tmp_path}: not a regular file (a folder)"


RAISE = "raise it with `parplan --max-input-mib N` or PARPLAN_MAX_INPUT_MIB=N"


def test_oversized_file(tmp_path, monkeypatch):
    monkeypatch.setattr(source, "MAX_FILE_BYTES", 3 * 1024 * 1024)
    path = tmp_path / "big.json"
    path.write_bytes(b" " * (3 * 1024 * 1024 + 1))
    with pytest.raises(SourceError) as info:
        load_document(path)
    assert str(info.value) == f"{path}: file is 3,145,729 bytes; the limit is 3 MiB ({RAISE})"


@pytest.mark.parametrize(
    ("name", "size", "cap", "expected"),
    [
        ("a.yaml", 2 * MIB + 1, None, "file is 2,097,153 bytes; the limit is 2 MiB"),
        ("a.json", 2 * MIB + 1, None, None),  # JSON: only the general cap, 64 MiB
        ("a.json", 1025, 1024, "file is 1,025 bytes; the limit is 1,024 bytes"),
        ("a.yml", 5 * MIB, 8 * MIB, "file is 5,242,880 bytes; the limit is 2 MiB"),
    ],
)
def test_caps_by_kind(tmp_path, name, size, cap, expected):
    path = tmp_path / name
    with path.open("wb") as handle:
        handle.truncate(size)  # sparse: no disk used, never read
    with pytest.raises(SourceError) as info:
        load_document(path, max_bytes=cap)
    if expected is None:  # read and parsed: zeros are no JSON
        assert str(info.value) == f"{path}:1:1: malformed JSON: Expecting value"
    else:
        assert str(info.value) == f"{path}: {expected} ({RAISE})"


def test_extension_picks_the_parser(tmp_path):
    (tmp_path / "a.json").write_text('{"a": [1, 2.5, true, null, "s"]}', encoding="utf-8")
    (tmp_path / "a.yml").write_text("a: [1, 2.5, true, null, s]\n", encoding="utf-8")
    (tmp_path / "b.JSON").write_text("a: 1\n", encoding="utf-8")  # YAML text, JSON name
    expected = {"a": [1, 2.5, True, None, "s"]}
    assert load_document(tmp_path / "a.json").data == expected
    assert load_document(tmp_path / "a.yml").data == expected
    with pytest.raises(SourceError, match="malformed JSON"):
        load_document(tmp_path / "b.JSON")


def test_values_are_plain_python_types():
    doc = parse_document("i: 1\nf: 1.5\nb: yes\nt: true\nn: ~\ns: '1'\n1: int key\n", "f.yaml")
    assert doc.data == {
        "i": 1,
        "f": 1.5,
        "b": "yes",
        "t": True,
        "n": None,
        "s": "1",
        "1": "int key",
    }
    assert [type(v) for v in doc.data.values()] == [int, float, str, bool, type(None), str, str]


# --- positions ----------------------------------------------------------------------------------

DOC = """\
name: demo
nodes:
  - id: fc1
    op: MatMul
  - {id: act, op: Activation}
edges:
  - [fc1, act]
"""


@pytest.mark.parametrize(
    ("path", "line", "column"),
    [
        ((), 1, 1),
        (("name",), 1, 1),
        (("nodes",), 2, 1),
        (("nodes", 0), 3, 5),
        (("nodes", 0, "op"), 4, 5),
        (("nodes", 1), 5, 5),
        (("nodes", 1, "op"), 5, 15),
        (("edges", 0), 7, 5),
        (("edges", 0, 1), 7, 11),
        (("nodes", 1, "missing"), 5, 5),  # falls back to the nearest ancestor
        (("nope",), 1, 1),
    ],
)
def test_yaml_positions(path, line, column):
    ref = parse_document(DOC, "d.yaml").ref(path)
    assert ref == SourceRef("d.yaml", line, column, format_path(path))


@pytest.mark.parametrize(
    ("path", "line", "column"),
    [(("a",), 2, 3), (("a", "b"), 2, 9), (("a", "b", 1), 2, 18), (("c",), 3, 3)],
)
def test_json_positions(path, line, column):
    doc = parse_document('{\n  "a": {"b": [1, 2]},\n  "c": true\n}\n', "d.json", "json")
    assert doc.ref(path) == SourceRef("d.json", line, column, format_path(path))


def test_format_path():
    assert format_path(()) == ""
    assert format_path(("nodes", 3, "op")) == "nodes[3].op"
    assert format_path((0, "a")) == "[0].a"


def test_document_error_builds_the_requested_class():
    doc = parse_document(DOC, "d.yaml")
    err = doc.error(("nodes", 0, "op"), "bad op", GraphError)  # type: ignore[arg-type]
    assert isinstance(err, GraphError)
    assert str(err) == "d.yaml:4:5: nodes[0].op: bad op"
    assert str(doc.error(("name",), "bad")) == "d.yaml:1:1: name: bad"


# --- JSON positions: found by walking to the key, not by parsing the whole text again --------


def all_paths(value: object, path: tuple = ()) -> list[tuple]:
    """Every key path in a JSON value (mapping keys and list items), parents first."""
    found = [path]
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, item in items:
        found += all_paths(item, (*path, key))
    return found


def assert_json_positions_match_yaml_events(text: str, data: object) -> None:
    events = yaml_events.event_positions(text, pure=True)  # JSON is YAML: the reference positions
    locator = source._JsonLocator(text)
    for path in all_paths(data)[1:]:
        assert locator.position(path) == events[path], path


TRICKY = ["a,b", "[]", "{}", 'q"uote', "back\\slash", "é∂\u2028", "", "x" * 300]
# Text YAML reads as JSON does (the reference): no controls, no surrogates, within the BMP, not
# the two noncharacters YAML 1.2's printable set leaves out (#xFFFE, #xFFFF; Sec. 5.1), and not
# the byte order mark, which ruamel's reader does not count as a column.
TEXT = st.text(
    st.characters(
        max_codepoint=0xFFFF,
        exclude_categories=("Cc", "Cs"),
        exclude_characters="\ufeff\ufffe\uffff",
    ),
    max_size=8,
)
JSON_SCALARS = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.sampled_from(TRICKY) | TEXT
)  # fmt: skip
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(TEXT, inner, max_size=6),
    max_leaves=30,
)


@settings(max_examples=150, deadline=None)
@given(JSON_VALUES, st.sampled_from([None, 0, 2]), st.booleans())
def test_json_positions_match_the_parser(data, indent, ascii_only):
    text = json.dumps({"doc": data}, indent=indent, ensure_ascii=ascii_only)
    assert_json_positions_match_yaml_events(text, {"doc": data})


def test_json_positions_in_long_lists_of_flat_and_nested_items():
    items: list[object] = []
    for i in range(1_300):  # runs of 256 flat items, broken by nested ones
        items.append([i, {"deep": [i]}] if i % 300 == 299 else {"id": f"n{i}", "s": TRICKY[i % 8]})
    data = {"nodes": items, "edges": [[f"n{i}", f"n{i + 1}"] for i in range(600)], "z": 1}
    for indent in (None, 1):
        text = json.dumps(data, indent=indent)
        assert_json_positions_match_yaml_events(text, data)


def test_json_positions_walk_back_and_forth_along_a_list():
    text = json.dumps({"a": list(range(1_000))}, indent=0)  # item i is on line i + 3
    doc = parse_document(text, "f.json", "json")
    assert [doc.ref(("a", i)).line for i in (900, 5, 999, 600, 1_000)] == [903, 8, 1002, 603, 2]
    assert doc.ref(("a", "x")).line == 2 and doc.ref(("b",)).line == 1  # nearest ancestor


# --- reading files: never blocks, never reads past the limit -----------------------------------


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda p: os.mkfifo(p), "not a regular file (a named pipe)"),
        (lambda p: p.symlink_to("/dev/zero"), "not a regular file (a character device)"),
        (lambda p: p.mkdir(), "not a regular file (a folder)"),
        (lambda p: p.symlink_to(p), "cannot read file: Too many levels of symbolic links"),
    ],
    ids=["fifo", "dev-zero", "folder", "link-loop"],
)
def test_what_is_not_a_regular_file_is_never_opened(tmp_path, make, expected):
    path = tmp_path / "in.json"
    make(path)  # a FIFO with no writer: opening it to read would wait forever
    with pytest.raises(SourceError) as info:
        reading.read_text(path)
    assert str(info.value) == f"{path}: {expected}"


def test_a_file_whose_size_is_unknown_is_read_up_to_the_limit_only():
    with pytest.raises(SourceError) as info:  # /proc files say they are 0 bytes
        reading.read_text("/proc/self/maps", max_bytes=100)
    assert (
        str(info.value)
        == f"/proc/self/maps: file holds more than 100 bytes; the limit is 100 bytes ({RAISE})"
    )


def test_input_limit_replaces_every_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(source, "MAX_YAML_BYTES", 2048)
    path = tmp_path / "g.yaml"
    path.write_text("a: [" + "1, " * 1_000 + "1]\n", encoding="utf-8")  # 3,006 bytes
    with pytest.raises(SourceError, match="the limit is 2,048 bytes"):
        load_document(path)
    with reading.input_limit(4096):  # raised, for every kind
        assert len(load_document(path).data["a"]) == 1_001
    with reading.input_limit(1024), pytest.raises(SourceError, match="the limit is 1,024 bytes"):
        load_document(path, max_bytes=64 * MIB)  # lowered, whatever the kind's cap
    assert reading.size_limit(64 * MIB) == 64 * MIB  # restored after the block


def test_text_from_the_file_in_a_message_is_escaped_and_bounded():
    key = json.dumps("k\x1b[2J" + "x" * 10_000)
    message = error_of(f'{{"a": 1, {key}: 1, {key}: 2}}', "json")
    assert message.startswith("f.json: malformed JSON: duplicate key 'k\\x1b[2Jxxx")
    assert message.endswith(" more characters)") and len(message) < 300
    message = error_of("a: 1\n" + "b" * 10_000 + " [1]: 2\n")
    assert len(message) < 300, message


# --- memory: the defects built the whole document (or all its positions) to show one error -----


def traced_peak(step: Callable[[], object]) -> int:
    """Bytes allocated at the peak while `step` runs (tracemalloc: deterministic)."""
    tracemalloc.start()
    try:
        step()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_position_deep_in_a_big_json_costs_little_memory():
    nodes = [{"id": f"n{i}", "op": "MatMul", "flops": i} for i in range(50_000)]
    text = json.dumps({"nodes": nodes, "edges": [[f"n{i}", f"n{i + 1}"] for i in range(50_000)]})
    doc = parse_document(text, "g.json", "json")  # 3.5 MB, one line
    peak = traced_peak(lambda: doc.ref(("edges", 49_999, 1)).line)
    assert doc.ref(("edges", 49_999, 1)).column == len(text) - len('"n50000"]]}') + 1
    assert peak < 256 * 1024  # every position from the parser's events, as before: 95 MiB


def test_a_merge_key_bomb_is_refused_with_little_memory():
    assert traced_peak(lambda: error_of(MERGE_BOMB)) < 2 * MIB
