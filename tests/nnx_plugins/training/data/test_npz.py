"""The npz dataset and its bounded reader: headers checked before data, hostile files refused."""

import io
import zipfile

import numpy as np
import pytest

from nnx_plugins import DataError
from nnx_plugins.training.data._files import LIMIT_VARIABLE
from nnx_plugins.training.data._npz import MAX_HEADER, NpzDataset, read_npz


def npy(header, data=b""):
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue() + data


def crafted(path, members, compression=zipfile.ZIP_STORED):
    with zipfile.ZipFile(path, "w", compression) as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    return path


def test_npz_with_and_without_a_test_split(tmp_path):
    x = np.arange(20, dtype=np.float64).reshape(10, 2)
    y = np.arange(10) % 3
    np.savez(tmp_path / "plain.npz", x=x, y=y)
    data = NpzDataset(str(tmp_path / "plain.npz"), test_fraction=0.2)
    assert data.x_train.shape == (8, 2) and data.x_test.shape == (2, 2)
    assert data.x_train.dtype == np.float32 and data.y_test.tolist() == [2, 0]
    np.savez(tmp_path / "named.npz", inputs=x, labels=y, xt=x[:3], yt=y[:3])
    data = NpzDataset(str(tmp_path / "named.npz"), x="inputs", y="labels", x_test="xt", y_test="yt")
    assert data.x_train.shape == (10, 2) and data.x_test.shape == (3, 2)
    assert (
        data.describe().classes is None and data.name == "named.npz"
    )  # (labels: checked at train)


def test_dtypes_are_kept_except_64_bits(tmp_path):
    tokens = np.arange(40, dtype=np.int64).reshape(10, 4) % 7
    np.savez(
        tmp_path / "t.npz",
        x=tokens,
        y=np.ones((10, 4), np.uint8),
        x_test=tokens[:2].astype(np.int16),
        y_test=np.ones((2, 4), np.uint8),
    )
    data = NpzDataset(str(tmp_path / "t.npz"))
    assert data.x_train.dtype == np.int32 and data.y_train.dtype == np.uint8
    assert data.x_test.dtype == np.int16
    info = data.describe()
    assert info.inputs.dtype == np.int32 and info.targets.shape == (4,) and info.classes is None


def test_fortran_order_and_empty_arrays_read_back(tmp_path):
    x = np.asfortranarray(np.arange(12.0).reshape(4, 3))
    np.savez(tmp_path / "f.npz", x=x, y=np.zeros(4, int), e=np.zeros((0, 3)))
    found = read_npz(tmp_path / "f.npz", ["x", "e"])
    np.testing.assert_array_equal(found["x"], x)
    assert found["e"].shape == (0, 3)


def test_the_reader_never_reads_more_than_the_header_says(tmp_path):
    path = crafted(
        tmp_path / "long.npz",
        {"x.npy": npy({"descr": "<f4", "fortran_order": False, "shape": (2,)}, b"\0" * 12)},
    )
    with pytest.raises(
        DataError,
        match=r"array 'x' claims shape \(2,\) of float32 \(8 bytes\) but the archive holds 12 bytes",
    ):
        read_npz(path, ["x"])


@pytest.mark.parametrize(
    "header, match",
    [
        (
            {"descr": "<f8", "fortran_order": False, "shape": (10**11, 64)},
            r"claims shape \(100000000000, 64\) of float64 \(51,200,000,000,000 bytes\) but the archive holds 0 bytes",
        ),
        (
            {"descr": "|V1000000000", "fortran_order": False, "shape": (1,)},
            r"claims shape \(1,\) of \|V1000000000 \(1,000,000,000 bytes\) but the archive holds 0 bytes",
        ),
        (
            {"descr": "|O", "fortran_order": False, "shape": (2,)},
            r"array 'x' holds Python objects; only numbers are read \(no pickle\)",
        ),
        (
            {"descr": "<f8", "fortran_order": False, "shape": (-5,)},
            r"array 'x' (claims an invalid shape|has an unreadable header)",
        ),
    ],
)
def test_lying_headers_are_refused_before_reading(tmp_path, header, match):
    path = crafted(tmp_path / "lie.npz", {"x.npy": npy(header), "y.npy": np.lib.format.magic(1, 0)})
    with pytest.raises(DataError, match=match):
        read_npz(path, ["x"])


def test_a_huge_header_length_is_refused(tmp_path):
    content = np.lib.format.magic(2, 0) + (MAX_HEADER + 1).to_bytes(4, "little") + b" " * 10
    path = crafted(tmp_path / "h.npz", {"x.npy": content})
    with pytest.raises(
        DataError, match=r"array 'x' has a header of 65,537 bytes .* the file is corrupt or crafted"
    ):
        read_npz(path, ["x"])


def test_a_zip_bomb_is_refused_by_its_declared_size(tmp_path, monkeypatch):
    zeros = np.zeros(8 * 2**20, np.uint8)  # 8 MiB of zeros: ~8 KiB compressed
    np.savez_compressed(tmp_path / "bomb.npz", x=zeros, y=np.zeros(1, np.uint8))
    assert (tmp_path / "bomb.npz").stat().st_size < 64 * 1024
    monkeypatch.setenv(LIMIT_VARIABLE, str(2**20))
    with pytest.raises(
        DataError,
        match=r"\(arrays x, y\) needs 8\.0 MB \(8,388,609 bytes\) in memory, more than NNX_DATA_MAX_BYTES=1048576",
    ):
        read_npz(tmp_path / "bomb.npz", ["x", "y"])


@pytest.mark.parametrize(
    "content, match",
    [
        (b"", r"cannot read it as an \.npz file \(BadZipFile"),
        (b"garbage" * 100, r"cannot read it as an \.npz file \(BadZipFile"),
    ],
)
def test_empty_and_garbage_files(tmp_path, content, match):
    (tmp_path / "bad.npz").write_bytes(content)
    with pytest.raises(DataError, match=match):
        read_npz(tmp_path / "bad.npz", ["x"])


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.9, 0.97])
def test_truncated_files(tmp_path, keep):
    np.savez_compressed(
        tmp_path / "d.npz", x=np.random.default_rng(0).normal(size=(500, 20)), y=np.arange(500)
    )
    data = (tmp_path / "d.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(
        DataError, match=r"cut\.npz: (cannot read it as an \.npz file|array '\w+' ends)"
    ):
        read_npz(tmp_path / "cut.npz", ["x", "y"])


def test_a_corrupted_member_fails_its_checksum(tmp_path):
    np.savez(tmp_path / "d.npz", x=np.ones((100, 4)), y=np.zeros(100, int))
    data = bytearray((tmp_path / "d.npz").read_bytes())
    start = data.find(b"\x00\x00\xf0\x3f") + 8  # (inside x's data: 1.0 as float64)
    data[start] ^= 0xFF
    (tmp_path / "d.npz").write_bytes(bytes(data))
    with pytest.raises(
        DataError, match=r"cannot read it as an \.npz file \(BadZipFile: Bad CRC-32"
    ):
        read_npz(tmp_path / "d.npz", ["x", "y"])


@pytest.mark.parametrize(
    "arrays, match",
    [
        (
            {"x": np.ones((4, 2))},
            r"has no array 'y'; it holds the arrays 'x'\. Set data\.x / data\.y",
        ),
        (
            {"x": np.ones((4, 2)), "y": np.zeros(3, int)},
            r"d\.npz: 'x' has 4 examples but 'y' has 3",
        ),
        (
            {
                "x": np.ones((4, 2)),
                "y": np.zeros(4),
                "x_test": np.ones((2, 2)),
                "y_test": np.zeros(3),
            },
            r"'x_test' has 2 examples but 'y_test' has 3",
        ),
        (
            {
                "x": np.ones((4, 2)),
                "y": np.zeros(4),
                "x_test": np.ones((1, 5)),
                "y_test": np.zeros(1),
            },
            r"'x' has examples of shape \(2,\) but 'x_test' of shape \(5,\)",
        ),
        ({"x": np.array(["a", "b"]), "y": np.zeros(2)}, r"d\.npz: x holds <U1 values"),
        ({"x": np.float64(1.0), "y": np.zeros(2)}, r"d\.npz: x is a single value"),
        (
            {"x": np.ones((2, 2)), "y": np.array([0, 2**31 + 5])},
            r"y\[1\] is 2147483653, which does not fit in int32",
        ),
        (
            {"x": np.array([[0.0, np.nan], [1, 1], [1, 1]]), "y": np.zeros(3, int)},
            r"'x'\[0, 1\] is nan|x\[0, 1\] is nan",
        ),
    ],
)
def test_arrays_that_do_not_fit(tmp_path, arrays, match):
    np.savez(tmp_path / "d.npz", **arrays)
    with pytest.raises(DataError, match=match):
        _ = NpzDataset(str(tmp_path / "d.npz")).arrays


def test_the_constructor_checks_its_arguments():
    with pytest.raises(DataError, match=r"test_fraction must be in \(0, 1\), got 1\.5") as info:
        NpzDataset("a.npz", test_fraction=1.5)
    assert info.value.key == "test_fraction"


@pytest.mark.parametrize(
    "content, match",
    [
        (
            np.lib.format.magic(1, 0)[:6] + bytes([9, 0]) + b"\0\0",
            r"array 'x' has a \.npy header of unknown version 9",
        ),
        (b"PK not numpy", r"array 'x' is not a \.npy array \(no NUMPY header\)"),
        (np.lib.format.magic(1, 0), r"array 'x' ends inside its header: the file is truncated"),
        (
            np.lib.format.magic(1, 0) + (200).to_bytes(2, "little") + b"{'descr'",
            r"array 'x' ends inside its header: the file is truncated",
        ),
        (
            np.lib.format.magic(1, 0) + (10).to_bytes(2, "little") + b"[[[[[[[[[\n",
            r"array 'x' has an unreadable header",
        ),
    ],
)
def test_broken_npy_headers(tmp_path, content, match):
    path = crafted(tmp_path / "h.npz", {"x.npy": content})
    with pytest.raises(DataError, match=match):
        read_npz(path, ["x"])


def test_a_large_member_that_expands_like_a_zip_bomb_is_refused(tmp_path, monkeypatch):
    np.savez_compressed(
        tmp_path / "bomb.npz", x=np.zeros(80 * 2**20, np.uint8), y=np.zeros(1, np.uint8)
    )
    assert (tmp_path / "bomb.npz").stat().st_size < 1 << 20
    monkeypatch.delenv(LIMIT_VARIABLE, raising=False)
    with pytest.raises(
        DataError,
        match=r"array 'x' expands 1,0\d\d times \(.* compressed, 80\.0 MB once read\): .* refused as a likely zip bomb\. If the data is genuine, set NNX_DATA_MAX_BYTES",
    ):
        read_npz(tmp_path / "bomb.npz", ["x", "y"])
    monkeypatch.setenv(LIMIT_VARIABLE, str(2**30))  # (the user vouches for it)
    assert read_npz(tmp_path / "bomb.npz", ["x"])["x"].shape == (80 * 2**20,)


def test_a_zip_archive_that_is_no_npz_and_a_header_numpy_cannot_parse_are_not_quoted(tmp_path):
    """Errors about a file's content name its type and size: a zip's member names and a
    header's text are not quoted (numpy's own message quotes the whole header)."""
    path = crafted(tmp_path / "docs.npz", {"passwords.txt": b"hunter2", "notes.md": b"x"})
    with pytest.raises(
        DataError, match=r"holds no \.npy array \(2 other members\): it is a zip archive but not"
    ) as error:
        read_npz(path, ["x", "y"])
    assert "passwords" not in str(error.value)
    header = b"{'descr': 'secret-token-abc', 'fortran_order': False, 'shape': (2,)}    \n"
    content = np.lib.format.magic(1, 0) + len(header).to_bytes(2, "little") + header
    path = crafted(tmp_path / "h.npz", {"x.npy": content, "y.npy": content})
    with pytest.raises(DataError, match=r"array 'x' has an unreadable header of 73 bytes") as error:
        read_npz(path, ["x", "y"])
    assert "secret" not in str(error.value)
