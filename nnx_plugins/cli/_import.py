"""``nnx import hf SRC --out DST [--dtype D]`` and ``nnx converters list [PATTERN]``.

``import hf`` turns a transformers model directory into an nnx config and checkpoint
(`nnx_plugins.import_hf`); ``converters list`` reads package metadata only, like the other
listing commands.

Example:
    >>> from nnx_plugins.cli._main import build_parser
    >>> args = build_parser().parse_args(["import", "hf", "models/tiny", "--out", "tiny"])
    >>> args.source, args.out, args.dtype
    ('models/tiny', 'tiny', None)
"""

from __future__ import annotations

import argparse
import pathlib
from typing import Any

from ..registry._discovery import GROUPS
from ._names import names_table
from ._output import add_command, console, fail, report

__all__ = ["add_commands"]

_DTYPES = ("float32", "bfloat16", "float16")


def _import_hf(args: argparse.Namespace) -> int:
    from .._stopping import pending, shielded, stop_on_signals
    from ..pretrained._errors import PretrainedError  # (here, as those below: light ones)

    with stop_on_signals():  # (Ctrl-C and SIGTERM: DST whole or absent, one line said)
        try:
            with shielded():  # (a stop inside jaxlib's native start aborts the process: after)
                from ..pretrained._import import import_hf  # (here: listing must not import jax)

            done = import_hf(args.source, args.out, dtype=args.dtype)
            dtype = done.dtype
            if done.converted_from is not None:
                dtype += f", converted from the checkpoint's {done.converted_from}"
            console().print(
                f"imported {done.architecture} ({done.parameters:,} parameters, {dtype}, "
                f"{done.bytes:,} bytes) from {_shown(args.source)} into "
                f"{_shown(str(done.directory))}: config.yaml, "
                "checkpoint/.\n" + _next_steps(done.config, done.checkpoint)
            )
            return 0
        except KeyboardInterrupt as stop:
            return _stopped(stop, args.out)
        except Exception as error:  # noqa: BLE001 - re-raised unless a stop explains it
            asked = pending()  # (an error that followed a stop: the stop is what happened,
            if asked is not None:  # e.g. a lock of Python's threading broken by it)
                return _stopped(asked, args.out)
            if isinstance(error, PretrainedError):
                return fail(str(error))
            raise


def _shown(path: str) -> str:
    """``path`` as the report line shows it: as it is, or escaped (``repr``) when it holds a
    newline or another character that is not printable."""
    return path if path.isprintable() else repr(path)


def _stopped(stop: BaseException, out: str) -> int:
    """Say that the import stopped, and whether DST was put in place before; the status."""
    from .._stopping import stop_message, was_published

    text, status = stop_message(stop, "import", out, complete=was_published(out))
    report(text)
    return status


def _next_steps(config: Any, checkpoint: Any) -> str:
    """What to run next with an imported model, by what its config trains: generate text
    (a causal LM), or fine-tune it on data of its kind (a masked LM, an image classifier)."""
    import yaml

    data = (yaml.safe_load(pathlib.Path(config).read_text()) or {}).get("data") or {}
    if data.get("type") == "text" and not data.get("masking"):
        return f"  nnx generate {config} --checkpoint {checkpoint} --prompt TEXT"
    if data.get("type") == "text":
        return f"  fine-tune it (masked LM): nnx train {config} data.path=notes.txt"
    return (
        f"  its config has no data: give it some (e.g. data: {{type: npz, path: images.npz}}, "
        f"NHWC images), then nnx train {config} or nnx eval {config} --checkpoint {checkpoint}"
    )


def _converters_list(args: argparse.Namespace) -> int:
    rows, listing = names_table(
        "converter", args.pattern, f"nnx converters ({GROUPS['converter']})"
    )
    console().print(listing)
    if args.pattern and not rows:
        return fail(f"no converter name matches {args.pattern!r}.")
    return 0


def add_commands(subparsers: Any) -> None:
    """Register ``import hf`` and ``converters list``."""
    group = subparsers.add_parser("import", help="import pretrained checkpoints")
    actions = group.add_subparsers(dest="action", metavar="ACTION", required=True)
    hf = add_command(
        actions,
        "hf",
        _import_hf,
        "import a transformers model directory (config.json + safetensors) as an nnx config "
        "and checkpoint",
    )
    hf.add_argument("source", help="the directory transformers' save_pretrained wrote")
    hf.add_argument("--out", required=True, help="a new or empty directory to write into")
    hf.add_argument(
        "--dtype",
        choices=_DTYPES,
        default=None,
        help="the parameters' dtype (default: the checkpoint's)",
    )
    converters = subparsers.add_parser("converters", help="checkpoint converters (nnx.converters)")
    listing_actions = converters.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = add_command(
        listing_actions, "list", _converters_list, "list converter names (metadata only)"
    )
    listing.add_argument("pattern", nargs="?", help="substring or glob, e.g. 'Llama*'")
