"""``nnx export jax|hf FILE --checkpoint DIR --out OUT``: a trained model for serving, or back
to transformers.

``jax`` writes a serialized `jax.export` artifact (StableHLO, the weights inside) that plain jax
loads with ``jax.export.deserialize`` and runs without nnx; ``hf`` writes a directory
transformers loads (a model of ``nnx import hf``, LoRA adapters merged). Each export writes its
output whole or not at all and never replaces an existing path; stopped by Ctrl-C or SIGTERM
it says so in one line and exits 130 or 143, its output whole or absent. A report that cannot
be printed once the output is whole (stdout on a full disk, a closed pipe) is one line on
stderr saying so, exit 1; the output stays. jax is imported inside the handlers only, so the
listing commands stay fast.

Example:
    >>> from nnx_plugins.cli._main import build_parser
    >>> args = build_parser().parse_args(
    ...     ["export", "jax", "gpt.yaml", "--checkpoint", "ckpt", "--out", "gpt.jax",
    ...      "--input-shape", "b,128"])
    >>> args.file, args.checkpoint, args.out, args.input_shape
    ('gpt.yaml', 'ckpt', 'gpt.jax', 'b,128')
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from .._errors import NnxError
from .._text import os_problem
from ._checkpoint import CHECKPOINT_OPTION, resolve_checkpoint
from ._config import one_file
from ._output import add_command, report

__all__ = ["add_commands"]


def _export_jax(args: argparse.Namespace) -> int:
    return _stoppable(_write_jax, args)


def _export_hf(args: argparse.Namespace) -> int:
    return _stoppable(_write_hf, args)


def _stoppable(command: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run an export; Ctrl-C or SIGTERM stops it with its output whole or absent and one line
    said (exit 130 or 143), an error of the input is one line (exit 1)."""
    from .._stopping import pending, stop_message, stop_on_signals, was_published

    with stop_on_signals():
        try:
            return command(args)
        except KeyboardInterrupt as stop:
            text, status = stop_message(stop, "export", args.out, complete=was_published(args.out))
        except NnxError as error:  # (configs, checkpoints, shapes, the output: they say where)
            asked = pending()  # (an error that followed a stop: the stop is what happened)
            if asked is None:
                report(f"nnx: error: {error}")
                return 1
            text, status = stop_message(asked, "export", args.out, complete=was_published(args.out))
        report(text)
        return status


def _write_jax(args: argparse.Namespace) -> int:
    from .._stopping import shielded

    with shielded():  # (a stop inside jaxlib's native start aborts the process: after)
        from ..config._load import load_config  # (here: listing stays light)
        from ..pretrained._export_jax import export_jax  # (here: listing stays light)
        from ..training._config import load_train_config  # (here: listing stays light)

    given = one_file(args, "export jax FILE --checkpoint DIR --out FILE [options] [KEY=VALUE...]")
    if given is None:
        return 2
    config = load_config(given[0], overrides=given[1])
    chosen = resolve_checkpoint(args.checkpoint, load_train_config(config))
    result = export_jax(
        config,
        checkpoint=chosen.path,
        out=args.out,
        input_shape=args.input_shape,
        input_dtype=args.input_dtype,
    )
    return _said(
        f"wrote {result.path} ({result.size / 2**20:.1f} MiB): {result.inputs} -> "
        f"{result.outputs}; run it with jax.export.deserialize(open(path, 'rb').read()).call(x)",
        result.path,
    )


def _write_hf(args: argparse.Namespace) -> int:
    from .._stopping import shielded

    with shielded():  # (a stop inside jaxlib's native start aborts the process: after)
        from ..config._load import load_config  # (here: listing stays light)
        from ..pretrained._export_hf import export_hf  # (here: listing stays light)
        from ..training._config import load_train_config  # (here: listing stays light)

    given = one_file(args, "export hf FILE --checkpoint DIR --out DIR [options] [KEY=VALUE...]")
    if given is None:
        return 2
    config = load_config(given[0], overrides=given[1])
    chosen = resolve_checkpoint(args.checkpoint, load_train_config(config))
    result = export_hf(config, checkpoint=chosen.path, out=args.out, hf_config=args.hf_config)
    merged = f", {result.adapters} LoRA projections merged" if result.adapters else ""
    return _said(
        f"wrote {result.directory}: {result.architecture}, {result.tensors} tensors "
        f"({result.size / 2**20:.1f} MiB){merged}; load it with transformers' "
        f"{result.auto_class}.from_pretrained",
        result.directory,
    )


def _said(text: str, out: Any) -> int:
    """Print the report of the export written whole at ``out``: 0. One that cannot be printed
    (stdout on a full disk, a pipe closed by its reader, a closed stdout) is one line on stderr
    saying that ``out`` is complete all the same: 1."""
    try:
        print(text, flush=True)
    except OSError as error:
        problem = os_problem(error)
    except ValueError:  # (print on a closed sys.stdout)
        problem = "it is closed"
    else:
        return 0
    report(
        f"nnx: error: {out} was written whole (it is complete), but the report of it could not "
        f"be printed on stdout: {problem}."
    )
    return 1


def _common(parser: argparse.ArgumentParser, out: str) -> None:
    parser.add_argument("file", metavar="FILE", help="the config of the model")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="set a value by path, as for nnx train (e.g. data.path=notes.txt)",
    )
    parser.add_argument("--checkpoint", **CHECKPOINT_OPTION)
    parser.add_argument(
        "--out", metavar=out, required=True, help=f"the {out.lower()} to write; it must not exist"
    )


def add_commands(subparsers: Any) -> None:
    """Register ``export jax`` and ``export hf`` on the ``nnx`` command's subparsers."""
    export = subparsers.add_parser(
        "export", help="write a trained model for serving or for other libraries"
    ).add_subparsers(dest="action", metavar="FORMAT", required=True)
    to_jax = add_command(
        export,
        "jax",
        _export_jax,
        "write a serialized jax.export artifact (StableHLO, weights inside) that plain jax "
        "runs; batch and sequence length symbolic where the model allows",
    )
    _common(to_jax, "FILE")
    to_jax.add_argument(
        "--input-shape",
        metavar="AXES",
        default=None,
        help="the whole input shape, batch first, each axis a size or a name for a symbolic "
        "size, e.g. b,128 or 1,8,8,1 (default: from the data section, batch and sequence "
        "length symbolic)",
    )
    to_jax.add_argument(
        "--input-dtype",
        default=None,
        choices=("float32", "float16", "bfloat16", "int32", "int64", "uint8", "bool"),
        help="the input's dtype (default: the data's; int32 for token ids)",
    )
    to_hf = add_command(
        export,
        "hf",
        _export_hf,
        "write a directory transformers loads (from_pretrained): the model of nnx import hf, "
        "fine-tuned or not, LoRA adapters merged",
    )
    _common(to_hf, "DIR")
    to_hf.add_argument(
        "--hf-config",
        metavar="FILE",
        default=None,
        help="transformers' config.json of the model (default: the config.json beside FILE, "
        "where nnx import hf keeps it)",
    )
