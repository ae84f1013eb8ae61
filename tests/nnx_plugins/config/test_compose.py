"""Includes merged under a file, KEY=VALUE overrides on top, every value located where written."""

import re

import pytest

from nnx_plugins import ConfigError, ConfigLimits, load_config
from nnx_plugins.config._compose import compose, merge
from nnx_plugins.config._limits import Budget
from nnx_plugins.config._source import Source

LINEAR = "model: {type: Linear, in_features: 2, out_features: 3}\n"


def composed(config, *overrides):
    return compose(config, list(overrides), Budget(ConfigLimits(), "test"))


def write(folder, **files):
    for name, text in files.items():
        path = folder / name.replace("__", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder


# -- includes ------------------------------------------------------------------------------------
def test_mappings_merge_key_by_key_lists_are_replaced_the_includer_wins(tmp_path):
    write(
        tmp_path,
        **{
            "one.yaml": "train: {steps: 1, seed: 1, batch_size: 8}\nlist: [1, 2, 3]\n",
            "two.yaml": "train: {seed: 2}\nlist: [4]\nonly_two: {a: 1}\n",
            "main.yaml": "include: [one.yaml, two.yaml]\ntrain: {steps: 3}\n",
        },
    )
    source = composed(tmp_path / "main.yaml")
    assert source.data == {
        "train": {"steps": 3, "seed": 2, "batch_size": 8},
        "list": [4],
        "only_two": {"a": 1},
    }
    assert source.problem(("train", "steps"), "x").location.endswith("main.yaml:2:16")
    assert source.problem(("train", "seed"), "x").location.endswith("two.yaml:1:15")
    assert source.problem(("train", "batch_size"), "x").location.endswith("one.yaml:1:40")
    assert source.problem(("list", 0), "x").location.endswith("two.yaml:2:8")
    assert source.problem(("only_two", "a", "deeper"), "x").location.endswith("two.yaml:3:15")
    assert source.problem(("train", "seed"), "x", at_key=True).location.endswith("two.yaml:1:9")


def test_includes_are_relative_to_the_including_file_and_may_be_one_name(tmp_path):
    write(
        tmp_path,
        **{
            "configs__base__model.yaml": LINEAR,
            "configs__base__all.yaml": "include: model.yaml\ntrain: {steps: 2}\n",
            "configs__run.yaml": "include: [base/all.yaml]\n",
        },
    )
    assert composed(tmp_path / "configs" / "run.yaml").data == {
        "model": {"type": "Linear", "in_features": 2, "out_features": 3},
        "train": {"steps": 2},
    }


def test_a_mapping_includes_relative_to_the_current_directory(tmp_path, monkeypatch):
    write(tmp_path, **{"base.yaml": LINEAR})
    monkeypatch.chdir(tmp_path)
    config = load_config({"include": ["base.yaml"], "model": {"out_features": 7}})
    assert config.model["out_features"] == 7 and config.model["in_features"] == 2


def test_a_file_included_twice_through_two_others_is_not_a_cycle(tmp_path):
    write(
        tmp_path,
        **{
            "base.yaml": LINEAR,
            "a.yaml": "include: [base.yaml]\ntrain: {seed: 1}\n",
            "b.yaml": "include: [base.yaml]\ntrain: {steps: 4}\n",
            "main.yaml": "include: [a.yaml, b.yaml]\n",
        },
    )
    assert load_config(tmp_path / "main.yaml").to_dict()["train"]["steps"] == 4


@pytest.mark.parametrize(
    ("main", "message"),
    [
        (
            "include: 5\n",
            r"main.yaml:1:10: include: 'include' takes a list of file names, got int 5",
        ),
        (
            "include: [base.yaml, notes.txt, 3, '']\n",
            r"main.yaml:1:22: include\[1\]: an include names a .yaml, .yml or .json file "
            r"\(relative to this file\), got str 'notes.txt'",
        ),
        (
            "include:\n  - base.yaml\n  - nowhere.yaml\n",
            r"main.yaml:3:5: include\[1\]: cannot include 'nowhere.yaml': there is no file "
            r".*nowhere.yaml",
        ),
        (
            "include: [main.yaml]\n",
            r"main.yaml:1:11: include\[0\]: include cycle: .*main.yaml -> .*main.yaml\.",
        ),
        ("include: [bad.yaml]\n", r"bad.yaml:3:2: <root>: invalid YAML: .*expected"),
    ],
)
def test_include_errors_are_located_at_the_entry_or_in_the_included_file(tmp_path, main, message):
    write(tmp_path, **{"base.yaml": LINEAR, "main.yaml": main, "bad.yaml": "a:\n  - 1\n b: 2\n"})
    with pytest.raises(ConfigError, match=message):
        load_config(tmp_path / "main.yaml")


def test_every_bad_entry_is_reported(tmp_path):
    write(tmp_path, **{"main.yaml": "include: [a.txt, 3, '']\n"})
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "main.yaml")
    assert [p.path for p in info.value.problems] == [("include", 0), ("include", 1), ("include", 2)]


def test_a_cycle_names_the_chain(tmp_path):
    write(
        tmp_path,
        **{
            "a.yaml": "include: [b.yaml]\n",
            "b.yaml": "include: [sub/c.yaml]\n",
            "sub__c.yaml": "model: {type: relu}\ninclude: [../a.yaml]\n",
        },
    )
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "a.yaml")
    (problem,) = info.value.problems
    assert problem.location.endswith("sub/c.yaml:2:11") and problem.path == ("include", 0)
    names = [part.rsplit("/", 1)[-1] for part in problem.message.split(": ", 1)[1].split(" -> ")]
    assert names[:3] == ["a.yaml", "b.yaml", "c.yaml"] and names[3].startswith("a.yaml.")


@pytest.mark.parametrize(
    ("content", "held"),
    [
        ("- 1\n- 2\n", "a list of 2 items in 8 bytes"),
        ("just text\n", "text of 9 characters in 10 bytes"),
        ("42\n", r"a number \(int\) in 3 bytes"),
    ],
)
def test_an_included_file_that_is_not_a_mapping_is_refused_at_the_entry(tmp_path, content, held):
    write(tmp_path, **{"part.yaml": content, "main.yaml": "include: [part.yaml]\n" + LINEAR})
    with pytest.raises(
        ConfigError,
        match=rf"main.yaml:1:11: include\[0\]: cannot include .*part.yaml: it holds {held}, not "
        r"a mapping of sections\. An included file is merged key by key under this one; nothing "
        r"of it was used\.",
    ):
        load_config(tmp_path / "main.yaml")


SECRET = "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"


@pytest.mark.parametrize(
    "secret",
    [
        SECRET,  # a plain scalar of two lines
        "password: [1, 2\n",  # a syntax error
        '"api-key-12345"\n',
        "- token-abcdef\n- token-ghijkl\n",
        "!!timestamp 2001-99-99\n",  # a reader problem inside a file that is no config
        "key: !!binary c2VjcmV0\n",
    ],
)
def test_a_file_that_is_no_config_is_described_never_quoted(tmp_path, secret):
    """``include: [pw.yaml]`` where pw.yaml links to /etc/passwd quoted the file's first bytes.
    An error about a file's content names its type and size, never the content."""
    (tmp_path / "secret.txt").write_text(secret)
    (tmp_path / "pw.yaml").symlink_to(tmp_path / "secret.txt")
    write(tmp_path, **{"main.yaml": "include: [pw.yaml]\n" + LINEAR})
    for config in (tmp_path / "main.yaml", tmp_path / "pw.yaml"):
        with pytest.raises(ConfigError) as error:
            load_config(config)
        text = str(error.value)
        for word in ("root:", "daemon", "api-key", "token-", "password", "2001", "c2VjcmV0"):
            assert word not in text.replace(str(tmp_path), ""), text
    if secret == SECRET:
        with pytest.raises(
            ConfigError,
            match=rf"cannot include .*pw.yaml \(a link to {re.escape(str(tmp_path))}/secret.txt\): "
            r"it holds text of 79 characters in 80 bytes, not a mapping of sections",
        ):
            load_config(tmp_path / "main.yaml")


def test_an_empty_included_file_adds_nothing(tmp_path):
    write(tmp_path, **{"part.yaml": "", "main.yaml": "include: [part.yaml]\n" + LINEAR})
    assert load_config(tmp_path / "main.yaml").model["type"] == "Linear"


def chain(folder, length):
    """``f0.yaml`` includes ``f1.yaml`` ... includes ``f{length-1}.yaml`` (the model)."""
    for i in range(length - 1):
        (folder / f"f{i}.yaml").write_text(f"include: [f{i + 1}.yaml]\n")
    (folder / f"f{length - 1}.yaml").write_text(LINEAR)
    return folder / "f0.yaml"


def test_a_long_include_chain_is_bounded_by_max_files_alone(tmp_path):
    first = chain(tmp_path, 1000)  # (deeper than Python's recursion limit allows recursion)
    config = load_config(first, limits=ConfigLimits(max_files=5000))
    assert config.model["type"] == "Linear" and len(config.files) == 1000
    assert config.files[0] == str(first) and config.files[-1].endswith("f999.yaml")
    with pytest.raises(
        ConfigError,
        match=r"f49.yaml:1:11: include\[0\]: the config reads more than max_files=50 files "
        r"\(itself and its includes\); the include chain here is 51 files long: \S*f0.yaml -> "
        r"\S*f1.yaml -> \S*f2.yaml -> \.\.\. -> \S*f49.yaml -> \S*f50.yaml\. Raise the limit "
        r"with NNX_CONFIG_MAX_FILES=N",
    ) as info:
        load_config(first, limits=ConfigLimits(max_files=50))
    assert "max_depth" not in str(info.value)


def test_problems_of_included_files_join_the_rest(tmp_path):
    write(
        tmp_path,
        **{
            "base.yaml": "model:\n  type: Sequential\n  layers:\n    - {type: BatchNorm}\n"
            "train: {seed: 1, seed: 2}\n",
            "main.yaml": "include: [base.yaml]\ntrain: {stepz: 3}\n",
        },
    )
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "main.yaml")
    assert [(p.location.rsplit("/", 1)[-1], p.message[:30]) for p in info.value.problems] == [
        ("main.yaml:2:9", "unknown key 'stepz'. Did you m"),
        ("base.yaml:4:7", "missing required key 'num_feat"),
        ("base.yaml:5:18", "duplicate key 'seed'; only one"),
    ]


# -- overrides -----------------------------------------------------------------------------------
def test_overrides_set_values_by_path(tmp_path):
    write(tmp_path, **{"m.yaml": "model:\n  layers: [{a: 1}, {a: 2}]\ntrain: {}\n"})
    source = composed(
        tmp_path / "m.yaml",
        "model.layers[1].a=[3, 3]",
        "model.layers[-2].b={type: normal, stddev: 0.02}",
        "train.steps=5",
        "train.steps=6",
        "optimizer.learning_rate.peak_value=3e-3",
        "model.name=",
        "model.text='5'",
    )
    assert source.data == {
        "model": {
            "layers": [{"a": 1, "b": {"type": "normal", "stddev": 0.02}}, {"a": [3, 3]}],
            "name": None,
            "text": "5",
        },
        "train": {"steps": 6},
        "optimizer": {"learning_rate": {"peak_value": 0.003}},
    }
    assert source.problem(("train", "steps"), "x").location == "<override train.steps=6>:1:13"
    assert source.problem(("model", "layers", 0, "b", "stddev"), "x").location == (
        "<override model.layers[-2].b={type: normal, stddev: 0.02}>:1:43"
    )
    assert source.problem(("optimizer", "learning_rate"), "x", at_key=True).location == (
        "<override optimizer.learning_rate.peak_value=3e-3>:1:11"
    )
    assert source.problem(("model", "layers", 0, "a"), "x").location.endswith("m.yaml:2:16")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "model.layers[2].a=1",
            r"<override model.layers\[2\].a=1>:1:13: model.layers: index 2 is out of range: model.layers has 2 items\.",
        ),
        (
            "model.layers.x=1",
            r":1:14: model.layers: model.layers is a list: select an item with \[index\], got 'x'\.",
        ),
        (
            "model.type.x=1",
            r":1:12: model.type: cannot set a key inside model.type: it holds str 'Seq', not a mapping\.",
        ),
        (
            "model..x=1",
            r"<override model..x=1>:1:6: <root>: expected '=' after the key 'model'; write KEY=VALUE",
        ),
        (
            "=1",
            r"<override =1>:1:1: <root>: expected a key path such as .* at '=1'; write KEY=VALUE",
        ),
        (
            "model.x",
            r"<override model.x>:1:8: <root>: expected '=' after the key 'model.x'; write KEY=VALUE",
        ),
        (
            "model.x=[1, 2",
            r"<override model.x=\[1, 2>:1:14: model.x: invalid YAML: .*expected ',' or '\]'",
        ),
        (
            "include=[a.yaml]",
            r"<override include=\[a.yaml\]>:1:1: <root>: 'include' is read from config files only",
        ),
    ],
)
def test_bad_overrides_are_located_at_the_argument(tmp_path, override, message):
    write(tmp_path, **{"m.yaml": "model: {type: Seq, layers: [{a: 1}, {a: 2}]}\n"})
    with pytest.raises(ConfigError, match=message):
        composed(tmp_path / "m.yaml", override)


@pytest.mark.parametrize(
    "key",
    [".".join(["a"] * 5000), "train." + ".".join(["a"] * 300_000), "model.x" + "[0]" * 5000],
)
def test_an_override_key_path_is_bounded_by_max_depth_and_located_there(tmp_path, key):
    write(tmp_path, **{"m.yaml": LINEAR})
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "m.yaml", overrides=[key + "=1"])
    (problem,) = info.value.problems
    assert problem.source.startswith(f"<override {key[:20]}") and problem.line == 1
    assert 200 <= problem.column <= 310  # (at the 101st key)
    assert re.search(
        r"nested deeper than max_depth=100 levels .*NNX_CONFIG_MAX_DEPTH", str(problem)
    )


def test_every_bad_override_is_reported(tmp_path):
    write(tmp_path, **{"m.yaml": LINEAR})
    with pytest.raises(ConfigError) as info:
        composed(tmp_path / "m.yaml", "model.type.x=1", "ok=1", "=2")
    assert [p.source for p in info.value.problems] == ["<override model.type.x=1>", "<override =2>"]


def test_reader_problems_of_an_override_value_are_located_in_it(tmp_path):
    write(tmp_path, **{"m.yaml": LINEAR})
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "m.yaml", overrides=["model.kernel_init={type: zeros, type: ones}"])
    assert str(info.value.problems[0]) == (
        "<override model.kernel_init={type: zeros, type: ones}>:1:33: model.kernel_init.type: "
        "duplicate key 'type'; only one may be given."
    )


def test_an_override_of_an_included_value_is_validated_at_the_argument(tmp_path):
    write(tmp_path, **{"base.yaml": LINEAR, "m.yaml": "include: [base.yaml]\n"})
    with pytest.raises(ConfigError) as info:
        load_config(
            tmp_path / "m.yaml", overrides=["model.out_features=many", "model.in_feature=2"]
        )
    assert [str(p).split(": ")[:3] for p in info.value.problems] == [
        [
            "<override model.out_features=many>:1:20",
            "model.out_features",
            "Input should be a valid integer (got str 'many').",
        ],
        [
            "<override model.in_feature=2>:1:7",
            "model.in_feature",
            "unknown key 'in_feature' for Linear. Did you mean 'in_features'? Valid keys",
        ],
    ]


def test_overrides_of_a_mapping_and_of_an_empty_file(tmp_path):
    assert load_config({"model": {"type": "relu"}}, overrides=["model.type=gelu"]).model == {
        "type": "gelu"
    }
    (tmp_path / "empty.yaml").write_text("")
    assert load_config(tmp_path / "empty.yaml", overrides=["model.type=relu"]).model == {
        "type": "relu"
    }


def test_merge_of_plain_sources():
    low = Source("a", {"m": {"x": 1, "y": [1, 2]}, "k": 1}, values={("m", "x"): (1, 1)})
    high = Source("b", {"m": {"y": [3]}, "k": {"z": 0}}, values={("m", "y"): (2, 2)})
    out = merge(low, high)
    assert out.data == {"m": {"x": 1, "y": [3]}, "k": {"z": 0}}
    assert out.problem(("m", "x"), "p").location == "a:1:1"
    assert out.problem(("m", "y", 0), "p").location == "b:2:2"


def test_an_included_mapping_that_is_no_config_shows_nothing_of_its_content(tmp_path):
    """A Kubernetes secret parses as a mapping, and its ``data`` looked like a section: its
    values were quoted (``Unknown dataset 'aHVudGVyMg=='``)."""
    secret = "apiVersion: v1\nkind: Secret\ndata:\n  password: c2VjcmV0\n  type: aHVudGVyMg==\n"
    write(tmp_path, **{"secret.yaml": secret, "main.yaml": "include: [secret.yaml]\n" + LINEAR})
    with pytest.raises(ConfigError) as error:
        load_config(tmp_path / "main.yaml")
    (problem,) = error.value.problems
    assert problem.location.endswith("secret.yaml:1:1")
    assert problem.message.startswith(
        "not a config file: the top-level keys at lines 1, 2 are no config section (nor close "
        "to one), so nothing of this file is shown or used. Include only config files"
    )
    for word in ("apiVersion", "Secret", "c2VjcmV0", "aHVudGVyMg"):
        assert word not in str(error.value)


def test_an_included_config_with_a_misspelt_section_is_reported_as_usual(tmp_path):
    part = "trian: {steps: 3}\ndata: {type: digitz}\n"
    write(tmp_path, **{"part.yaml": part, "main.yaml": "include: [part.yaml]\n" + LINEAR})
    with pytest.raises(ConfigError) as error:
        load_config(tmp_path / "main.yaml")
    text = str(error.value)
    assert "part.yaml:1:1: trian: unknown section 'trian'. Did you mean 'train'?" in text
    assert "Unknown dataset 'digitz'. Did you mean 'digits'?" in text
