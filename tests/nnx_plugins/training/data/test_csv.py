"""The csv dataset: columns by name, integer or float targets, a test split, bounded reading
and every bad file named by its line and column, its cells never quoted."""

import numpy as np
import pytest

from nnx_plugins import DataError, load_config
from nnx_plugins.training.data._csv import MAX_HEADER_BYTES, CsvDataset, read_csv
from nnx_plugins.training.data._files import LIMIT_VARIABLE


def write(tmp_path, text, name="d.csv"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


ROWS = "".join(f"{i},{i * 0.5},{i % 3}\n" for i in range(10))


def test_columns_by_name_integer_targets_and_the_last_rows_for_testing(tmp_path):
    data = CsvDataset(write(tmp_path, "a,b,label\n" + ROWS), target="label")
    assert data.columns == () and data.x_train.shape == (8, 2) and data.columns == ("a", "b")
    assert data.x_train.dtype == np.float32 and data.y_train.dtype == np.int32
    np.testing.assert_array_equal(data.x_test, [[8, 4], [9, 4.5]])
    np.testing.assert_array_equal(data.y_test, [2, 0])
    info = data.describe()
    assert info.inputs.shape == (2,) and info.targets.shape == () and info.classes == 3


def test_chosen_inputs_several_float_targets_and_a_test_file(tmp_path):
    text = "id,name,x,y1,y2\n" + "".join(f"{i},row {i},{i},{i / 4},{-i}\n" for i in range(6))
    test = "x,y2,y1,other\n7,-7,1.75,whatever\n"
    data = CsvDataset(
        write(tmp_path, text),
        target=["y1", "y2"],
        inputs=["x"],
        test_path=write(tmp_path, test, "t.csv"),
    )
    assert data.x_train.shape == (6, 1) and data.y_train.shape == (6, 2)
    assert data.y_train.dtype == np.float32  # (y1 has fractions)
    np.testing.assert_array_equal(data.y_test, [[1.75, -7]])


def test_a_header_with_a_byte_order_mark_quotes_and_blank_lines(tmp_path):
    text = '\ufeff"a","b"\n1,"2"\n\n3,4\n5,6\n7,8\n9,10\n'
    data = CsvDataset(write(tmp_path, text), target="b", test_fraction=0.2)
    np.testing.assert_array_equal(data.y_train, [2, 4, 6, 8])


def test_the_config_of_a_run_reads_it_relative_to_the_config(tmp_path):
    write(tmp_path, "a,b,label\n" + ROWS)
    (tmp_path / "run.yaml").write_text(
        "model: {type: Linear, in_features: 2, out_features: 3}\n"
        "data: {type: csv, path: d.csv, target: label}\n"
    )
    from nnx_plugins.config._shapes import check_model
    from nnx_plugins.training._config import load_train_config

    config = load_train_config(load_config(tmp_path / "run.yaml"))
    assert config.sections["data"].arguments["path"] == str(tmp_path / "d.csv")
    assert check_model(config).output.shape == (2, 3)


@pytest.mark.parametrize(
    ("text", "options", "match"),
    [
        (
            "a,b,label\n" + ROWS,
            {"target": "lable"},
            r"the header has no column 'lable'\. Did you "
            r"mean 'label'\? Its columns: 'a', 'b', 'label'\.",
        ),
        ("a,b,label\n" + ROWS, {"target": "label", "inputs": ["a", "c"]}, r"no column 'c'"),
        (
            "a,b\n1,2\n3,4,5\n6,7\n",
            {"target": "b"},
            r"d\.csv: line 3 has 3 cells but the header "
            r"names 2 columns; every row needs one cell per column\.",
        ),
        ("a,b,c\n1,2,3\n4,5\n", {"target": "b", "inputs": ["a"]}, r"line 3 has 2 cells"),
        ("a,b,c\n1,2,3\n4,5,6,7\n", {"target": "b", "inputs": ["a"]}, r"line 3 has 4 cells"),
        (
            "a,b\n1,2\n3,secret-value\n",
            {"target": "b"},
            r"line 3, column 'b': the cell \(12 "
            r"characters\) is not a number\. Cells are numbers such as 3",
        ),
        ("a,b\n1,2\n3,\n", {"target": "b"}, r"line 3, column 'b': the cell is empty"),
        ("a,b\n1,2\n\n3,nan\n", {"target": "b"}, r"line 4, column 'b': a NaN or infinity"),
        ("a,b\n1,1e999\n", {"target": "b"}, r"line 2, column 'b': a NaN or infinity"),
        ("a,b\n", {"target": "b"}, r"it holds a header but no rows"),
        ("", {"target": "b"}, r"the first line is empty"),
        ("a,,c\n1,2,3\n", {"target": "c"}, r"column 2 of the header has no name"),
        ("a,b,a\n1,2,3\n", {"target": "b"}, r"names the column 'a' twice \(columns 1 and 3\)"),
        ("a,b\n1,2\n", {"target": "b"}, r"it holds 1 row: too few for a training and a test split"),
        ("a,b\n" + "1,2\n" * 5, {"target": ["a", "b"]}, r"every column is a target"),
        ("a,b\n1,2\n\xe9\n", {"target": "b"}, None),  # (written as UTF-8: fine until parsed)
    ],
)
def test_bad_files_are_located_by_line_and_column(tmp_path, text, options, match):
    data = CsvDataset(write(tmp_path, text), **options)
    if match is None:
        with pytest.raises(DataError, match=r"line 3 has 1 cells"):
            data.describe()
        return
    with pytest.raises(DataError, match=match) as error:
        data.describe()
    assert "secret" not in str(error.value)


def test_bytes_that_are_not_utf_8_are_located(tmp_path):
    path = tmp_path / "d.csv"
    path.write_bytes(b"a,b\n1,2\n3,\xe9\n")
    with pytest.raises(DataError, match=r"line 3 is not UTF-8 text \(the byte 0xe9 at offset 10\)"):
        read_csv(str(path), ["a"])


def test_a_file_past_the_memory_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path = write(tmp_path, "a,b\n" + "1,2\n" * 1000)
    monkeypatch.setenv(LIMIT_VARIABLE, "1000")
    with pytest.raises(
        DataError,
        match=r"d\.csv \(CSV, 4,004 bytes\) needs .* more than "
        rf"{LIMIT_VARIABLE}=1000",
    ):
        read_csv(path, ["a"])


def test_a_header_that_is_no_header_is_refused_bounded(tmp_path):
    path = write(tmp_path, "x" * (MAX_HEADER_BYTES + 10))
    with pytest.raises(DataError, match=r"the first line is longer than 1,048,576 characters"):
        read_csv(path, ["a"])


def test_a_path_that_is_no_regular_file(tmp_path):
    with pytest.raises(DataError, match=r"no such file"):
        read_csv(str(tmp_path / "missing.csv"), ["a"])
    with pytest.raises(DataError, match=r"is a directory"):
        read_csv(str(tmp_path), ["a"])


@pytest.mark.parametrize(
    ("options", "key", "match"),
    [
        ({"target": []}, "target", r"target must name a column"),
        ({"target": "a", "inputs": []}, "inputs", r"inputs must name at least one column"),
        (
            {"target": "a", "inputs": ["a"]},
            "inputs",
            r"the column 'a' is both a target and an input",
        ),
        (
            {"target": "a", "test_fraction": 1.0},
            "test_fraction",
            r"test_fraction must be in \(0, 1\)",
        ),
        ({"target": "a", "delimiter": ";;"}, "delimiter", r"delimiter must be one character"),
        ({"target": "a", "delimiter": '"'}, "delimiter", r"delimiter must be one character"),
    ],
)
def test_bad_arguments_are_refused_when_the_config_is_read(options, key, match):
    with pytest.raises(DataError, match=match) as error:
        CsvDataset("d.csv", **options)
    assert error.value.key == key


def test_a_bad_argument_is_located_in_the_config(tmp_path):
    (tmp_path / "run.yaml").write_text(
        "model: {type: Linear, in_features: 2, out_features: 3}\n"
        "data: {type: csv, path: d.csv, target: label, test_fraction: 2}\n"
    )
    from nnx_plugins import ConfigError
    from nnx_plugins.training._config import load_train_config

    with pytest.raises(
        ConfigError, match=r"run.yaml:2:\d+: data.test_fraction: .*test_fraction must be in"
    ):
        load_train_config(load_config(tmp_path / "run.yaml"))


def test_a_file_with_no_delimiter_is_not_quoted_and_the_delimiter_named(tmp_path):
    path = write(tmp_path, "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1::/:/sbin/nologin\n")
    with pytest.raises(
        DataError,
        match=r"the header is one column of 31 characters and has no column 'y': it is not a "
        r"CSV file with the delimiter given \(set data\.delimiter",
    ) as error:
        CsvDataset(path, target="y").describe()
    assert "root" not in str(error.value).replace(str(tmp_path), "")
    data = CsvDataset(write(tmp_path, "a;b\n1;2\n3;4\n", "semi.csv"), target="b", delimiter=";")
    assert data.x_train.tolist() == [[1.0]]


def test_no_more_than_the_size_checked_is_read(tmp_path, monkeypatch):
    """A file that claims a size (a /proc file claims 0) is read no further than it."""
    import os as os_module

    path = write(tmp_path, "a,b\n" + "1,2\n" * 50)
    real = os_module.fstat

    def shrunk(fd):
        info = real(fd)
        return os_module.stat_result((*info[:6], 12, *info[7:]))  # (st_size: 12 bytes)

    from nnx_plugins.training.data import _csv

    monkeypatch.setattr(_csv.os, "fstat", shrunk)
    np.testing.assert_array_equal(read_csv(path, ["a", "b"]), [[1, 2], [1, 2]])
