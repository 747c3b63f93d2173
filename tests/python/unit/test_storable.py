"""Values made storable before they join a statement (durajobs._values.storable)."""

from __future__ import annotations

import json

import pytest

from durajobs._values.storable import json_text, plain_text


def test_json_text_keeps_what_jsonb_holds():
    value = {"name": "café 😀", "n": [1, 2.5, None, True], "escaped": "a\\u0000b"}
    assert json.loads(json_text(value)) == value


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ({"a": "x\x00y"}, "NUL"),
        (["\udcff.csv"], "lone surrogate"),
        (float("nan"), "Out of range float values"),
    ],
)
def test_json_text_refuses_what_jsonb_refuses(value, named):
    with pytest.raises(ValueError, match=named):
        json_text(value)


def test_json_text_refuses_what_is_not_json():
    with pytest.raises(TypeError):
        json_text({"at": object()})


def test_plain_text_escapes_a_nul_and_a_lone_surrogate():
    assert plain_text("a\x00b \udcff", 100) == "a\\x00b \\udcff"
    assert plain_text("plain", 100) == "plain"


def test_plain_text_cuts_by_bytes_never_within_a_character():
    assert plain_text("ab€", 4) == "ab"  # € is 3 bytes: it does not fit whole
    assert plain_text("ab€", 5) == "ab€"
    assert len(plain_text("é" * 100_000, 65_536).encode("utf-8")) <= 65_536
