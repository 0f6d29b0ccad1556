"""Loading YAML and JSON safely: refused content, exact error positions, key-path positions."""

from __future__ import annotations

import textwrap
import time

import pytest

from parplan_gen import source
from parplan_gen.errors import GraphError, SourceError, SourceRef
from parplan_gen.source import format_path, load_document, parse_document


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


def test_alias_bomb_is_bounded(monkeypatch):
    monkeypatch.setattr(source, "MAX_VALUES", 10_000)
    start = time.perf_counter()
    assert error_of(BOMB) == "f.yaml: document expands to more than 10000 values (alias bomb?)"
    assert time.perf_counter() - start < 2


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
    assert str(info.value) == f"{tmp_path}: not a regular file"


def test_oversized_file(tmp_path, monkeypatch):
    monkeypatch.setattr(source, "MAX_FILE_BYTES", 3 * 1024 * 1024)
    path = tmp_path / "big.json"
    path.write_bytes(b" " * (3 * 1024 * 1024 + 1))
    with pytest.raises(SourceError) as info:
        load_document(path)
    assert str(info.value) == f"{path}: file is 3145729 bytes; the limit is 3 MiB"


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
