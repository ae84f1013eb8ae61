"""``nnx train FILE`` and ``nnx eval FILE --checkpoint DIR``.

Training imports jax, optax and pydantic inside the handlers only, so that the listing commands
of the other groups stay fast.

Example:
    >>> from nnx_plugins.cli._main import build_parser
    >>> args = build_parser().parse_args(["train", "cnn.yaml", "--mesh", "data=8", "--resume"])
    >>> args.file, args.mesh, args.resume
    ('cnn.yaml', 'data=8', True)
    >>> build_parser().parse_args(["train", "cnn.yaml", "train.epochs=5"]).overrides
    ['train.epochs=5']
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rich.console import Console

from .._errors import NnxError
from ._config import one_file

__all__ = ["add_commands"]


def _train(args: argparse.Namespace) -> int:
    from ..config._load import load_config  # (here: listing stays light)
    from ..training._loop import train  # (here: listing stays light)
    from ..training._mesh import parse_mesh  # (here: listing stays light)
    from ..training._run_dir import RunError  # (here: listing stays light)

    given = one_file(args, "train FILE [KEY=VALUE...] [options]")
    if given is None:
        return 2
    console = Console(highlight=False)
    try:
        mesh = parse_mesh(args.mesh) if args.mesh else None
        result = train(
            load_config(given[0], overrides=given[1]),
            run_dir=args.run_dir,
            resume=args.resume,
            mesh=mesh,
            progress=not args.no_progress,
            console=console,
            allow_large=args.allow_large,
        )
    except RunError as error:  # the run directory, the devices, the batch
        print(f"nnx: error: {error}", file=sys.stderr)
        return 1
    except NnxError as error:  # (configs, checkpoints, data: they say where themselves)
        print(str(error), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(
            "nnx: interrupted. The checkpoints written so far are intact (saves are atomic); "
            "continue with the same command and --resume.",
            file=sys.stderr,
        )
        return 130
    console.print(f"{_what_was_trained(result)}; run directory {result.run_dir}", soft_wrap=True)
    console.print(f"checkpoint: {result.checkpoint}", soft_wrap=True)
    console.print(f"test accuracy: {result.test_accuracy:.2%} (test loss {result.test_loss:.4f})")
    return 0


def _what_was_trained(result: Any) -> str:
    """What this command did, in words that stay true after a resume."""
    if result.steps_trained == 0:
        return f"nothing left to train: the run is already at step {result.step}"
    first = result.step - result.steps_trained
    span = f" (steps {first + 1} to {result.step})" if first else ""
    return f"trained {result.steps_trained} steps{span} in {result.seconds:.1f} s"


def _eval(args: argparse.Namespace) -> int:
    from ..training._loop import evaluate  # (here: listing stays light)

    try:
        metrics = evaluate(args.file, args.checkpoint)
    except NnxError as error:
        print(str(error), file=sys.stderr)
        return 1
    print(
        f"checkpoint {metrics['checkpoint']} (step {metrics['step']}): test accuracy "
        f"{metrics['accuracy']:.2%} (test loss {metrics['loss']:.4f})"
    )
    return 0


def add_commands(subparsers: Any) -> None:
    """Register ``train`` and ``eval`` on the ``nnx`` command's subparsers."""
    text = "train the model of a config file (progress, eval, checkpoints, metrics, plot)"
    parser = subparsers.add_parser("train", help=text, description=text)
    parser.set_defaults(handler=_train)
    parser.add_argument(
        "file", metavar="FILE", help="config with model/optimizer/data/train/checkpoint"
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="set a value by path, e.g. train.epochs=5 (VALUE is YAML); saved resolved in the run",
    )
    parser.add_argument(
        "--run-dir",
        metavar="DIR",
        default=None,
        help="where metrics.jsonl, metrics.png and checkpoints/ go (default runs/<config name>)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue from the newest checkpoint of the run directory",
    )
    parser.add_argument(
        "--mesh",
        metavar="data=N[,model=M]",
        default=None,
        help="data-parallel (and model-sharded) training over N*M devices",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--allow-large",
        action="store_true",
        help="train even when the memory estimate exceeds the memory available",
    )

    text = "evaluate a checkpoint on the test split of a config's data"
    parser = subparsers.add_parser("eval", help=text, description=text)
    parser.set_defaults(handler=_eval)
    parser.add_argument("file", metavar="FILE")
    parser.add_argument(
        "--checkpoint",
        metavar="DIR",
        required=True,
        help="a checkpoint directory, or a directory of step_N checkpoints",
    )
