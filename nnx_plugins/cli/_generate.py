"""``nnx generate FILE --checkpoint DIR --prompt TEXT [--prompt TEXT...] [--max-tokens N]
[--temperature T] [--top-k K] [--seed S] [KEY=VALUE...]``: text from a trained language model.

The prompt and its continuation go to stdout (nothing else, so the text can be piped); with
several ``--prompt`` (continued as one batch) each prompt and its continuation, in order, an
empty line between them. The line saying which checkpoint, how many tokens and how fast goes
to stderr. The text is written through ``sys.stdout``, so that a stdout that cannot take it
(a full disk, a closed stream) is the command's one error line and exit status 1
(`nnx_plugins.cli._main.main`). Generation imports jax inside the handler only, so the
listing commands stay fast.

Example:
    >>> from nnx_plugins.cli._main import build_parser
    >>> args = build_parser().parse_args(
    ...     ["generate", "gpt.yaml", "--checkpoint", "runs/gpt/checkpoints", "--prompt", "def ",
    ...      "--prompt", "class ", "--max-tokens", "50", "--temperature", "0.8", "--top-k", "10"])
    >>> args.file, args.prompt, args.max_tokens, args.temperature, args.top_k, args.seed
    ('gpt.yaml', ['def ', 'class '], 50, 0.8, 10, 0)
"""

from __future__ import annotations

import argparse
import re
import sys
import threading
from collections.abc import Callable
from typing import Any

from .._errors import NnxError
from ._checkpoint import CHECKPOINT_OPTION, resolve_checkpoint
from ._config import one_file
from ._output import add_compile_cache_option, report

__all__ = ["add_commands"]


def _generate(args: argparse.Namespace) -> int:
    """Generate, under the commands' stop mechanism: Ctrl-C (or SIGTERM) is one line and exit
    130 (143), nothing printed on stdout, even when the stop landed in a garbage-collector
    callback (Python prints it as "ignored" and goes on: the text came out, exit 0)."""
    from .._stopping import check, pending, shielded, stop_on_signals

    with stop_on_signals():
        try:
            with shielded():  # (a stop inside jaxlib's native start aborts the process: after)
                from ..generation import _generate  # noqa: F401 - (imports jax)
            status = _generated(args, check)
        except KeyboardInterrupt as stop:
            status = _stopped(stop)
        except Exception:  # (an error that followed a stop, e.g. a library's wrapping of it)
            asked = pending()
            if asked is None:
                raise
            status = _stopped(asked)
    return status


def _stopped(stop: BaseException) -> int:
    """Say that generation stopped (it writes no file); the exit status."""
    from .._stopping import stopped_how

    how, status = stopped_how(stop)
    report(f"nnx: {how}.")
    return status


def _generated(args: argparse.Namespace, check: Callable[[], None]) -> int:
    from ..config._errors import ConfigError  # (here: listing stays light)
    from ..config._load import load_config  # (here: listing stays light)
    from ..generation._generate import generate, transformers_config  # (listing stays light)
    from ..training._config import load_train_config  # (here: listing stays light)

    given = one_file(args, "generate FILE --checkpoint DIR --prompt TEXT [options] [KEY=VALUE...]")
    if given is None:
        return 2
    try:
        try:
            config = load_train_config(load_config(given[0], overrides=given[1]))
        except ConfigError:
            said = transformers_config(given[0])  # (not one line per key of config.json)
            if said is None:
                raise
            report(f"nnx: error: {given[0]}: {said}")
            return 1
        chosen = resolve_checkpoint(args.checkpoint, config)
        result = _waited(
            generate,
            config,
            checkpoint=chosen.path,
            prompt=args.prompt[0] if len(args.prompt) == 1 else args.prompt,
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            top_k=args.top_k,
            seed=args.seed,
            compile_cache=not args.no_compile_cache,
        )
    except NnxError as error:  # (configs, checkpoints, data, prompts: they say where)
        check()  # (an error that followed a stop: the stop is what happened)
        report(f"nnx: error: {error}")
        return 1
    check()  # (a stop lost in a garbage-collector callback: no text, the stop is said)
    several = not isinstance(result.prompt, str)
    pairs = zip(result.prompt, result.text) if several else [(result.prompt, result.text)]
    write_text("\n".join(prompt + text + "\n" for prompt, text in pairs))
    counts = [len(t) for t in result.tokens] if several else [len(result.tokens)]
    rate = sum(counts) / max(result.seconds, 1e-9)
    facts = [f"step {result.step}"] if result.step is not None else []  # (imported: no step)
    facts += [chosen.note] if chosen.note else []
    why = f" ({', '.join(facts)})" if facts else ""
    each = f" ({', '.join(map(str, counts))} per prompt)" if several else ""
    held = sum(map(len, result.unfinished)) if several else len(result.unfinished)
    unfinished = (
        f"; {held} byte{'s' * (held != 1)} of a character the last tokens did not finish held "
        "back (invalid UTF-8 alone)"
        if held
        else ""
    )
    report(
        f"nnx: {sum(counts)} tokens{each} from {result.checkpoint}{why} "
        f"in {result.seconds:.1f} s ({rate:.0f} tokens/s, compilation included){unfinished}"
    )
    return 0


def _waited(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)`` in a worker thread, the main thread waiting for it.

    Python runs a signal's handler in the main thread, between two of its bytecodes: with the
    decoding in the main thread, Ctrl-C waited for XLA's whole program (a model without a
    maximum length asked for 10,000,000 tokens went on for hours, Ctrl-C or not). The main
    thread now only waits, so a stop is raised there at once; the command then says it and
    the process ends (`nnx_plugins.cli._main.run`), the worker with it."""
    done: dict[str, Any] = {}

    def work() -> None:
        try:
            done["result"] = function(*args, **kwargs)
        except BaseException as error:  # noqa: BLE001 - raised again in the main thread
            done["error"] = error

    worker = threading.Thread(target=work, name="nnx-generate", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.05)
    if "error" in done:
        raise done["error"]
    return done["result"]


def write_text(text: str) -> None:
    """Write ``text`` on stdout as UTF-8, whatever the locale's encoding (a character it
    cannot spell is no reason to fail after the work is done): the stream is switched to
    UTF-8 (``reconfigure``) and written through ``sys.stdout`` itself, never past it to its
    byte buffer, so that a failed write is seen as the output's (`nnx_plugins.cli._main`
    says it in one line: a full disk, a closed stdout); written past it, 8 kB or more to a
    full disk were a traceback.

    Raises:
        OSError: stdout cannot take the text.
    """
    stream = sys.stdout
    stream.flush()
    encoding = str(getattr(stream, "encoding", None) or "utf-8")
    reconfigure = getattr(stream, "reconfigure", None)
    if encoding.lower().replace("-", "").replace("_", "") != "utf8" and callable(reconfigure):
        reconfigure(encoding="utf-8")
    stream.write(text)
    stream.flush()


_DIGITS = re.compile(r"[0-9]{1,30}\Z")


def _whole(least: int, most: int | None = None) -> Any:
    def parse(text: str) -> int:
        value = int(text) if _DIGITS.match(text) else None
        if value is None or value < least or (most is not None and value > most):
            shown = repr(text) if len(text) <= 40 else f"{len(text):,} characters"
            bounds = f">= {least}" if most is None else f"from {least} to {most:,}"
            raise argparse.ArgumentTypeError(f"expected a whole number {bounds}, got {shown}")
        return value

    return parse


MAX_TEMPERATURE = 3.4028234663852886e38
"""float32's largest (`nnx_plugins.generation._decode.MAX_TEMPERATURE`; here without jax)."""


def _temperature(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= MAX_TEMPERATURE:
        shown = repr(text) if len(text) <= 40 else f"{len(text):,} characters"
        raise argparse.ArgumentTypeError(
            f"expected a finite number >= 0 (0 is greedy decoding) and at most "
            f"{MAX_TEMPERATURE:g}, got {shown}"
        )
    return value


def add_commands(subparsers: Any) -> None:
    """Register ``generate`` on the ``nnx`` command's subparsers."""
    text = "continue a prompt with a trained language model (decoding with the KV cache)"
    parser = subparsers.add_parser("generate", help=text, description=text)
    parser.set_defaults(handler=_generate)
    parser.add_argument("file", metavar="FILE", help="the config the model was trained with")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="set a value by path, as for nnx train (e.g. data.path=notes.txt)",
    )
    parser.add_argument("--checkpoint", **CHECKPOINT_OPTION)
    parser.add_argument(
        "--prompt",
        metavar="TEXT",
        required=True,
        action="append",
        help="the text to continue; several --prompt are continued as one batch",
    )
    parser.add_argument(
        "--max-tokens",
        metavar="N",
        type=_whole(1),
        default=None,
        help="tokens to add to each prompt (default: as many as fit the model's maximum length, "
        "at most 100); the longest prompt and N tokens must fit it; a row ends early at the "
        "tokenizer's EOS",
    )
    parser.add_argument(
        "--temperature",
        metavar="T",
        type=_temperature,
        default=1.0,
        help="softmax temperature; 0 is greedy decoding (default 1.0)",
    )
    parser.add_argument(
        "--top-k",
        metavar="K",
        type=_whole(1),
        default=None,
        help="draw among the K most likely tokens only (default: all)",
    )
    parser.add_argument(
        "--seed",
        metavar="S",
        type=_whole(0, 2**63 - 1),
        default=0,
        help="random seed, 0 to 2**63-1 as train.seed (default 0)",
    )
    add_compile_cache_option(parser)
