"""The one place input is parsed and shown (fourdb/untrusted.py): YAML without aliases, JSON of bounded depth,
zips checked before they inflate, names that cannot become paths, and text that cannot become markup or a
terminal command."""
import io
import json
import zipfile

import numpy as np
import pytest

from fourdb.errors import FourdbError, UntrustedInputError
from fourdb.train import checkpoint
from fourdb.untrusted import (LimitError, check_name, check_zip_members, inside_output, load_json, load_yaml,
                              markdown_text, plain_file_name, safe_text)


def alias_bomb(levels: int) -> str:
    lines = ['a0: &a0 ["xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"]']
    for i in range(1, levels):
        refs = ", ".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + f"\nname: *a{levels - 1}\n"


def test_yaml_aliases_are_refused_before_they_expand():
    with pytest.raises(FourdbError, match=r"schema.yaml: not valid YAML \(line 2: an alias \(\*name\) is not allowed"):
        load_yaml(alias_bomb(11), "schema.yaml")
    assert load_yaml("name: shop\ntables: [{name: users}]\n", "schema.yaml") == {"name": "shop",
                                                                                 "tables": [{"name": "users"}]}


def test_yaml_and_json_nested_too_deep_are_one_line():
    with pytest.raises(FourdbError, match="nested deeper than 64"):
        load_yaml("a: " + "[" * 10_000 + "]" * 10_000, "task.yaml")
    with pytest.raises(FourdbError, match="record.json: not valid JSON"):
        load_json("[" * 100_000 + "]" * 100_000, "record.json")
    with pytest.raises(FourdbError, match="nested deeper than 64"):
        load_json("[" * 100 + "]" * 100, "record.json")
    assert load_json('{"a": [1, {"b": 2}]}', "record.json") == {"a": [1, {"b": 2}]}


def zip_bomb(path, size: int):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        with zf.open("label.npy", "w", force_zip64=True) as f:
            chunk = b"\0" * 2**20
            for _ in range(size // len(chunk)):
                f.write(chunk)


def test_a_zip_is_measured_before_it_inflates(tmp_path, monkeypatch):
    monkeypatch.setenv("FOURDB_MEMORY", "256MB")
    bomb = tmp_path / "bomb.npz"
    zip_bomb(bomb, 300 * 2**20)
    assert bomb.stat().st_size < 2 * 2**20
    with pytest.raises(LimitError, match=r"bomb.npz: its 1 members inflated would take .* over the memory bound"):
        check_zip_members(bomb)
    monkeypatch.setenv("FOURDB_MEMORY", "1GB")  # fits the bound, but a quarter of it at 300:1 is a bomb
    with pytest.raises(LimitError, match=r"bomb.npz: member 'label.npy' inflates .*:1 .* compression bomb"):
        check_zip_members(bomb)
    good = tmp_path / "good.npz"
    np.savez_compressed(good, x=np.arange(1000))
    check_zip_members(good)


def test_a_checkpoint_that_would_inflate_past_memory_is_not_resumed(tmp_path, monkeypatch):
    monkeypatch.setenv("FOURDB_MEMORY", "128MB")
    path = tmp_path / "checkpoint.npz"
    zip_bomb(path, 200 * 2**20)
    with pytest.raises(LimitError):
        checkpoint.read(path)


@pytest.mark.parametrize("name", ["/abs/path", "../../../X", "a/b", "..", ".hidden", "a\\b", "-rf", "c:x", "",
                                  "x\x00y", "x\ny", "\x1b]52;c;aGk=\x07"])
def test_a_name_from_input_never_becomes_a_path(name):
    with pytest.raises(UntrustedInputError, match="where"):
        plain_file_name(name, "where")


@pytest.mark.parametrize("name", ["users", "late-arrival", "Ümlaut table", "o'brien \"quoted\"", "a;b , range(1e13)"])
def test_plain_names_pass_as_text(name):
    assert check_name(name, "where") == name
    assert plain_file_name(name, "where") == name


def test_what_is_written_stays_in_its_folder(tmp_path):
    assert inside_output(tmp_path, "a/b.csv", "out") == tmp_path / "a/b.csv"
    for path in ("../x.csv", "/etc/x", "a/../../x"):
        with pytest.raises(UntrustedInputError, match="outside"):
            inside_output(tmp_path, path, "out")


def test_text_from_input_is_shown_as_text():
    hostile = "gbdt\n# Owned\x1b[2J\x1b]52;c;aGk=\x07<img src=x onerror=alert(1)>[x](javascript:alert(1))|"
    line = safe_text(hostile)
    assert "\n" not in line and "\x1b" not in line and "\x07" not in line and "\\x1b" in line
    md = markdown_text(hostile)
    assert "<img" not in md and "\\[x\\](javascript" in md and "\n" not in md and "|" not in md.replace("\\|", "")
    assert "&lt;img" in md
    assert safe_text("x" * 500).endswith("…") and len(safe_text("x" * 500)) == 200
    assert json.loads(json.dumps(safe_text("\u202eevil"))) == "\\u202eevil"
    assert io.StringIO(safe_text("plain name")).read() == "plain name"
