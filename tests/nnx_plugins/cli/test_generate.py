"""nnx generate FILE --checkpoint DIR --prompt TEXT ...: the text on stdout, the numbers on
stderr; bad input exits 1 with one located line, bad options exit 2."""

import re
import subprocess
import sys

import pytest

from nnx_plugins import train
from nnx_plugins.cli._main import main

from ..generation.test_generate import TEXT, write_run_config


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli-gpt")
    (folder / "cat.txt").write_text(TEXT, encoding="utf-8")
    config = write_run_config(folder)
    train(config, run_dir=folder / "run", progress=False)
    return folder, config


def generate(config, folder, *options):
    return ["generate", str(config), "--checkpoint", str(folder / "run" / "checkpoints"), *options]


def test_prints_the_prompt_and_its_continuation(run, capsys):
    folder, config = run
    argv = generate(
        config, folder, "--prompt", "the cat s", "--max-tokens", "6", "--temperature", "0"
    )
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert out == "the cat sat on \n"
    assert "nnx: 6 tokens from" in err and "(step 150)" in err and "tokens/s" in err
    sampled = generate(config, folder, "--prompt", "t", "--top-k", "3", "--seed", "4")
    assert main(sampled) == 0
    first = capsys.readouterr().out
    assert main(sampled) == 0 and capsys.readouterr().out == first
    assert len(first) == 16 + 1  # filled to the model's maximum length, and a newline


def test_the_installed_command(run):
    folder, config = run
    argv = generate(config, folder, "--prompt", "the m", "--max-tokens", "3", "--temperature", "0")
    done = subprocess.run(
        [sys.executable, "-m", "nnx_plugins.cli._main", *argv],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "the mat \n"


@pytest.mark.parametrize(
    ("options", "match"),
    [
        (["--prompt", "the dog"], "the character 'd' (position 4) is not in the vocabulary"),
        (["--prompt", "the", "--max-tokens", "20"], "past the model's maximum length of 16"),
        (["--prompt", ""], "the prompt must be non-empty text"),
    ],
)
def test_bad_input_is_one_line_and_exit_status_1(run, capsys, options, match):
    folder, config = run
    assert main(generate(config, folder, *options)) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("nnx: error: ") and match in err
    assert "Traceback" not in err


def test_a_vocabulary_that_differs_is_located_at_the_data_path(run, capsys, monkeypatch):
    folder, config = run
    (folder / "dog.txt").write_text("the dog sat on the log. " * 300, encoding="utf-8")
    monkeypatch.chdir(folder)  # (a relative path in an override is relative to the cwd)
    argv = generate(config, folder, "--prompt", "the", "data.path=dog.txt")
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "does not fit the config's data" in err and "<override data.path=dog.txt>:" in err
    assert "data.path: the checkpoint's character vocabulary (11 characters) differs" in err


@pytest.mark.parametrize(
    ("options", "match"),
    [
        (["--prompt", "t", "--max-tokens", "0"], "expected a whole number >= 1, got '0'"),
        (["--prompt", "t", "--temperature", "-1"], "expected a finite number >= 0"),
        (["--prompt", "t", "--temperature", "nan"], "expected a finite number >= 0"),
        (["--prompt", "t", "--temperature", "1e400"], "expected a finite number >= 0"),
        (["--prompt", "t", "--temperature", "1e39"], "and at most 3.40282e+38, got '1e39'"),
        (["--prompt", "t", "--top-k", "x"], "expected a whole number >= 1, got 'x'"),
        (["--prompt", "t", "--top-k", "\u00b2"], "expected a whole number >= 1, got '\u00b2'"),
        (
            ["--prompt", "t", "--seed", "-2"],
            "expected a whole number from 0 to 9,223,372,036,854,775,807, got '-2'",
        ),
        (
            ["--prompt", "t", "--seed", str(2**63)],
            "expected a whole number from 0 to 9,223,372,036,854,775,807, got "
            "'9223372036854775808'",
        ),
        (["--prompt", "t", "--max-tokens", "9" * 5000], "got 5,000 characters"),
        ([], "the following arguments are required: --prompt"),
    ],
)
def test_bad_options_are_usage_errors(run, capsys, options, match):
    folder, config = run
    with pytest.raises(SystemExit) as exit_:
        main(generate(config, folder, *options))
    assert exit_.value.code == 2 and match in capsys.readouterr().err


def test_two_files_is_a_usage_error(run, capsys):
    folder, config = run
    argv = ["generate", str(config), str(config), "--checkpoint", "x", "--prompt", "t"]
    assert main(argv) == 2
    assert "give one config FILE" in capsys.readouterr().err


def test_ctrl_c_is_one_line_and_exit_130(run, monkeypatch, capsys):
    import nnx_plugins.generation._generate as generation

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(generation, "generate", interrupted)
    folder, config = run
    assert main(generate(config, folder, "--prompt", "the")) == 130
    out, err = capsys.readouterr()
    assert out == "" and err == "nnx: interrupted.\n"


def test_a_prompt_the_shell_passed_in_latin_1_is_one_line(run, capsys):
    """``--prompt $'caf\\xe9'``: Python keeps the byte 0xe9 as the surrogate U+DCE9, which
    cannot be encoded; it was a traceback."""
    folder, config = run
    assert main(generate(config, folder, "--prompt", "caf\udce9")) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == (
        "nnx: error: the prompt holds the byte 0xe9 (position 3), which is not UTF-8: the "
        "terminal or the shell passed text in another encoding (Latin-1?). Give the prompt as "
        "UTF-8 text.\n"
    )


def test_a_tiny_temperature_prints_the_greedy_text(run, capsys):
    folder, config = run
    texts = []
    for temperature in ("0", "1e-38"):
        argv = ["--prompt", "the c", "--max-tokens", "8", "--temperature", temperature]
        assert main(generate(config, folder, *argv)) == 0
        texts.append(capsys.readouterr().out)
    assert texts[0] == texts[1] == "the cat sat o\n"


def test_the_text_is_written_as_utf_8_whatever_the_locale(monkeypatch):
    import io

    from nnx_plugins.cli._generate import write_text

    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw, encoding="ascii"))
    write_text("caf\u00e9 \u20ac\n")
    assert raw.getvalue() == "caf\u00e9 \u20ac\n".encode()


def test_the_language_model_summary_uses_the_docs_words(run, capsys):
    """`nnx eval` (and `nnx train`) of a language model said 'test accuracy' first; it says
    bits per token in the data's own unit (characters here, bytes for level: bytes)."""
    folder, config = run
    assert main(["eval", str(config), "--checkpoint", str(folder / "run" / "checkpoints")]) == 0
    out = capsys.readouterr().out
    assert re.search(
        r"\(step 150\): test: [\d.]+ bits per character, perplexity [\d.]+, next-character "
        r"accuracy [\d.]+% \(loss [\d.]+ nats per character\)\n",
        out,
    ), out
    assert "test accuracy" not in out and "bits_per_token" not in out


def test_the_commands_temperature_bound_is_float32s():
    from nnx_plugins.cli._generate import MAX_TEMPERATURE
    from nnx_plugins.generation._decode import MAX_TEMPERATURE as DECODING

    assert MAX_TEMPERATURE == DECODING


@pytest.mark.parametrize(
    ("stdout", "prompts", "said"),
    [
        ("full", 1, "no space left on the device (ENOSPC)"),
        ("full", 1200, "no space left on the device (ENOSPC)"),  # (11 kB: past the buffer)
        ("closed", 1, "stdout is closed (EBADF)"),
    ],
)
def test_an_output_that_cannot_be_written_is_one_line_and_exit_status_1(run, stdout, prompts, said):
    """> /dev/full was a traceback ending in OSError ENOSPC (also once the command said the
    output's errors: the text went past sys.stdout, to its byte buffer, which raised for 8 kB
    or more); >&- one ending in "AttributeError: 'NoneType' object has no attribute
    'flush'"."""
    folder, config = run
    argv = generate(config, folder, *["--prompt", "the m"] * prompts, "--max-tokens", "3")
    command = [sys.executable, "-m", "nnx_plugins.cli._main", *argv, "--temperature", "0"]
    if stdout == "full":
        with open("/dev/full", "wb") as full:
            done = subprocess.run(command, stdout=full, stderr=subprocess.PIPE, timeout=300)
    else:
        closed = ["sh", "-c", 'exec "$@" >&-', "sh", *command]  # (the shell's >&-)
        done = subprocess.run(closed, stderr=subprocess.PIPE, timeout=300)
    assert (done.returncode, done.stderr.decode()) == (
        1,
        f"nnx: error: cannot write the output on stdout: {said}.\n",
    )


def test_transformers_config_json_is_one_line(tmp_path, capsys):
    """26 lines of "unknown section 'architectures'", one per key of config.json."""
    import json

    given = tmp_path / "config.json"
    given.write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 8}))  # fmt: skip
    argv = ["generate", str(given), "--checkpoint", str(tmp_path), "--prompt", "t"]
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == (
        f"nnx: error: {given}: it is transformers' config.json (GPT2LMHeadModel), not an nnx "
        "config: import it first: nnx import hf FOLDER --out DST, then give DST/config.yaml.\n"
    )
    (tmp_path / "config.yaml").write_text("model: {type: relu}\n")
    assert main(argv) == 1
    assert f"not an nnx config: give {tmp_path / 'config.yaml'}, the config that nnx import hf wrote beside it.\n" in capsys.readouterr().err  # fmt: skip
