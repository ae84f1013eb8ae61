"""Every YAML/JSON block in docs/ and README.md that is a config validates (`check_model`: values,
abstract build, and shapes when it has a data section); a block marked with a preceding
``<!-- invalid config -->`` comment must fail instead."""

import json
import pathlib
import re

import pytest
import yaml

from nnx_plugins import ConfigError, check_model

ROOT = pathlib.Path(__file__).resolve().parents[3]
FILES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
BLOCK = re.compile(
    r"(?P<marker><!--\s*invalid config\s*-->[ \t]*\n)?```(?P<lang>yaml|yml|json)[ \t]*\n(?P<body>.*?)^```",
    re.S | re.M,
)


def parse(lang, body):
    return json.loads(body) if lang == "json" else yaml.safe_load(body)


def blocks():
    """``(lang, body, marked invalid, is a config)`` of every YAML/JSON block, with its place."""
    found = []
    for path in FILES:
        text = path.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start("body")) + 1
            data = parse(match["lang"], match["body"])
            is_config = isinstance(data, dict) and "model" in data
            where = f"{path.relative_to(ROOT)}:{line}"
            found.append((where, match["lang"], match["body"], bool(match["marker"]), is_config))
    return found


BLOCKS = blocks()
CONFIGS = [pytest.param(*block[1:4], id=block[0]) for block in BLOCKS if block[4]]


def test_the_docs_have_config_blocks_and_an_invalid_example():
    assert len(CONFIGS) >= 5
    assert any(param.values[2] for param in CONFIGS)


def test_only_configs_are_marked_invalid():
    assert [block[0] for block in BLOCKS if block[3] and not block[4]] == []


@pytest.mark.parametrize(("lang", "body", "invalid"), CONFIGS)
def test_doc_config(tmp_path, lang, body, invalid):
    path = tmp_path / f"block.{'json' if lang == 'json' else 'yaml'}"
    path.write_text(body, encoding="utf-8")
    if invalid:
        with pytest.raises(ConfigError, match=r"block\.(yaml|json):\d+:\d+: model"):
            check_model(path)
    else:
        check_model(path)
