"""``nnx predict FILE --checkpoint DIR --input IN --output OUT [KEY=VALUE...]``: a trained
model's outputs for the examples of a file.

``IN`` is an ``.npz`` file (the array ``--input-key``, default the config's ``data.x`` or ``x``)
or a ``.csv`` file with a header (the columns the config's ``csv`` data trains on, by name;
else every column). ``OUT`` is an ``.npz`` file (``predictions``: the model's outputs; with a
``classification`` task also ``labels``, the most likely class) or a ``.csv`` file (one row per
example). Everything that can be refused is refused before the model is built: an extension
that is neither, an output that exists (unless ``--overwrite``) or whose folder does not, an
input array or column that is missing, examples the model cannot take (what it takes per
example, found abstractly from the config's data, and what the file gives; else its first
layer that cannot, located in the config), token ids outside the model's first ``Embed`` (the
first named by row and position, with the valid range). The output is written to a temporary
file beside it and moved into place, so it is whole or absent, and a symbolic link at its
place is replaced, never followed. Heavy imports happen inside the handler, so the listing
commands stay fast.

Example:
    >>> from nnx_plugins.cli._main import build_parser
    >>> args = build_parser().parse_args(
    ...     ["predict", "mlp.yaml", "--checkpoint", "best", "--input", "x.csv", "--output", "y.csv"])
    >>> args.file, args.checkpoint, args.input, args.output, args.overwrite
    ('mlp.yaml', 'best', 'x.csv', 'y.csv', False)
"""

from __future__ import annotations

import argparse
from typing import Any

from .._errors import NnxError
from ._checkpoint import CHECKPOINT_OPTION, resolve_checkpoint
from ._config import one_file
from ._output import report

__all__ = ["add_commands"]

_USAGE = "predict FILE --checkpoint DIR --input IN --output OUT [KEY=VALUE...]"


def _predict(args: argparse.Namespace) -> int:
    """Predict; Ctrl-C or SIGTERM stops it with ``--output`` whole or as it was and one line
    said (exit 130 or 143)."""
    from .._stopping import pending, stop_message, stop_on_signals, was_published

    with stop_on_signals():
        try:
            return _write_predictions(args)
        except KeyboardInterrupt as stop:
            asked: BaseException = stop
        except NnxError as error:  # (an error that followed a stop: the stop is what happened)
            found = pending()
            if found is None:
                report(f"nnx: error: {error}")
                return 1
            asked = found
        complete = was_published(args.output)
        text, status = stop_message(
            asked, "predict", args.output, complete=complete, noun="prediction"
        )
        report(text)
        return status


def _write_predictions(args: argparse.Namespace) -> int:
    from .._stopping import shielded

    with shielded():  # (a stop inside jaxlib's native start aborts the process: after)
        from ..config._load import load_config  # (here: listing stays light)
        from ..training._config import load_train_config  # (here: listing stays light)
        from ._predict_files import (  # (here: it imports numpy and jax)
            check_output,
            check_suffix,
            check_writable,
            read_inputs,
            write_outputs,
        )
        from ._predict_model import check_inputs, predict  # (here: it imports jax)

    given = one_file(args, _USAGE)
    if given is None:
        return 2
    try:
        check_suffix(args.input, "input")
        check_output(args.output, overwrite=args.overwrite, input_path=args.input)
        config = load_train_config(load_config(given[0], overrides=given[1]))
        chosen = resolve_checkpoint(args.checkpoint, config)
        inputs = read_inputs(args.input, config, key=args.input_key)
        check_writable(args.output, check_inputs(config, inputs))
        result = predict(config, chosen.path, inputs.array, batch_size=args.batch_size)
        written = write_outputs(args.output, result, config)
    except NnxError as error:
        report(f"nnx: error: {error}")
        return 1
    why = f", {chosen.note}" if chosen.note else ""
    report(
        f"nnx: {len(inputs.array):,} examples ({inputs.origin}) through {result.checkpoint} "
        f"(step {result.step}{why}): {written} in {args.output}"
    )
    return 0


def _rows(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 1_000_000:
        shown = repr(text) if len(text) <= 40 else f"{len(text):,} characters"
        raise argparse.ArgumentTypeError(
            f"expected a whole number from 1 to 1,000,000, got {shown}"
        )
    return int(text)


def add_commands(subparsers: Any) -> None:
    """Register ``predict`` on the ``nnx`` command's subparsers."""
    text = "a trained model's outputs for the examples of an .npz or .csv file"
    parser = subparsers.add_parser("predict", help=text, description=text)
    parser.set_defaults(handler=_predict)
    parser.add_argument("file", metavar="FILE", help="the config the model was trained with")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="set a value by path, as for nnx train",
    )
    parser.add_argument("--checkpoint", **CHECKPOINT_OPTION)
    parser.add_argument(
        "--input", metavar="IN", required=True, help="the examples: an .npz or .csv file"
    )
    parser.add_argument(
        "--output", metavar="OUT", required=True, help="where the outputs go: .npz or .csv"
    )
    parser.add_argument(
        "--input-key",
        metavar="NAME",
        default=None,
        help="the array of an .npz input (default: the config's data.x, else x)",
    )
    parser.add_argument(
        "--batch-size",
        metavar="N",
        type=_rows,
        default=256,
        help="examples per forward pass (default 256)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace --output if it exists")
