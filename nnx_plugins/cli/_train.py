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
import contextlib
import os
import sys
from typing import Any

from rich.console import Console

from .._errors import NnxError
from ..training._address import address_problem
from ._checkpoint import CHECKPOINT_OPTION, resolve_checkpoint
from ._config import one_file
from ._output import add_compile_cache_option, report
from ._supervise import supervise

__all__ = ["add_commands"]


def _train(args: argparse.Namespace) -> int:
    from ..training._processes import ProcessGroup  # (here: listing stays light)

    given = one_file(args, "train FILE [KEY=VALUE...] [options]")
    if given is None:
        return 2
    group = _process_group(args, ProcessGroup)
    if group is None:
        return _run(args, given, None)
    label = group.label() if group.process_id is not None else "this process"
    return supervise(lambda: _run(args, given, group), label)  # (JAX may end it natively)


def _run(args: argparse.Namespace, given: Any, group: Any) -> int:
    """Train in this process (one of a group when ``group`` is given); the exit status."""
    from .._stopping import stop_on_signals, stopped_how  # (here: listing stays light)
    from ..config._load import load_config  # (here: listing stays light)
    from ..training._evaluation import describe_metrics  # (here: listing stays light)
    from ..training._loop import train  # (here: listing stays light)
    from ..training._mesh import parse_mesh  # (here: listing stays light)
    from ..training._run_dir import RunError  # (here: listing stays light)

    console = Console(highlight=False)
    try:
        # (SIGTERM handled once joined: JAX's join blocks in native code, where a Python
        # handler cannot run, so until then SIGTERM ends the process at once, as it did)
        with group or contextlib.nullcontext(), stop_on_signals():
            if group is not None and group.process_id != 0:
                _quiet_stdout()  # (process 0 reports for all; errors still go to stderr)
            mesh = parse_mesh(args.mesh) if args.mesh is not None else None
            config = load_config(given[0], overrides=given[1])
            result = train(
                config,
                run_dir=args.run_dir,
                resume=args.resume,
                mesh=mesh,
                progress=not args.no_progress,
                console=console,
                allow_large=args.allow_large,
                compile_cache=not args.no_compile_cache,
            )
    except RunError as error:  # the run directory, the devices, the batch, the processes
        report(f"nnx: error: {_who(group)}{error}")
        return 1
    except NnxError as error:  # (configs, checkpoints, data: they say where themselves)
        report(f"{_who(group)}{error}")
        return 1
    except KeyboardInterrupt as stop:
        how, status = stopped_how(stop)
        report(
            f"nnx: {_who(group)}{how}. The checkpoints written so far are intact (saves "
            "are atomic); continue with the same command and --resume."
        )
        return status
    if group is None or group.process_id == 0:
        console.print(
            f"{_what_was_trained(result)}; run directory {result.run_dir}", soft_wrap=True
        )
        console.print(f"checkpoint: {result.checkpoint}", soft_wrap=True)
        summary = describe_metrics(result.metrics, **summary_words(config))
        console.print(summary, soft_wrap=True)
    return 0


def _process_group(args: argparse.Namespace, group_type: Any) -> Any:
    """The `ProcessGroup` the multi-process options ask for, or None for one process."""
    given = (args.coordinator, args.num_processes, args.process_id)
    if not args.distributed and all(value is None for value in given):
        return None
    return group_type(
        coordinator=args.coordinator,
        num_processes=args.num_processes,
        process_id=args.process_id,
        heartbeat_timeout=args.heartbeat_timeout,
    )


def _who(group: Any) -> str:
    return f"{group.label()}: " if group is not None and group.joined else ""


def _quiet_stdout() -> None:
    """Send this process's stdout (file descriptor 1, so C++ output too) to the null device."""
    sys.stdout.flush()
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)


def summary_words(config: Any) -> dict[str, Any]:
    """`describe_metrics`' words for the config's data: ``token``, what a token is (its
    dataset's ``token_name``: ``byte`` for text read as bytes; ``token`` when the data does not
    say, or cannot be made: the run reported that already), and ``masked`` (masked-language-
    model data: its accuracy is of the masked tokens)."""
    from ..training._config import load_train_config  # (here: listing stays light)

    try:
        data = load_train_config(config).sections["data"].make()
    except Exception:  # noqa: BLE001 - only words of a summary depend on it
        return {"token": "token", "masked": False}
    name = getattr(data, "token_name", "token")
    name = name if isinstance(name, str) and name.isidentifier() else "token"
    return {"token": name, "masked": getattr(data, "masking", None) is not None}


def _what_was_trained(result: Any) -> str:
    """What this command did, in words that stay true after a resume."""
    if result.steps_trained == 0:
        return f"nothing left to train: the run is already at step {result.step}"
    if result.stopped_by:
        first = result.step - result.steps_trained
        return (
            f"trained {result.steps_trained} steps (steps {first + 1} to {result.step}) in "
            f"{result.seconds:.1f} s; {result.stopped_by} stopped the run"
        )
    first = result.step - result.steps_trained
    span = f" (steps {first + 1} to {result.step})" if first else ""
    return f"trained {result.steps_trained} steps{span} in {result.seconds:.1f} s"


def _eval(args: argparse.Namespace) -> int:
    from ..config._load import load_config  # (here: listing stays light)
    from ..training._config import load_train_config  # (here: listing stays light)
    from ..training._evaluation import describe_metrics  # (here: listing stays light)
    from ..training._loop import evaluate  # (here: listing stays light)

    given = one_file(args, "eval FILE --checkpoint DIR [KEY=VALUE...]")
    if given is None:
        return 2
    try:
        config = load_train_config(load_config(given[0], overrides=given[1]))
        chosen = resolve_checkpoint(args.checkpoint, config)
        metrics = evaluate(config, chosen.path, compile_cache=not args.no_compile_cache)
    except NnxError as error:
        report(str(error))
        return 1
    values = {k: v for k, v in metrics.items() if k not in ("step", "checkpoint")}
    why = f", {chosen.note}" if chosen.note else ""
    summary = describe_metrics(values, **summary_words(config))
    print(f"checkpoint {metrics['checkpoint']} (step {metrics['step']}{why}): {summary}")
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
        metavar="data=N,fsdp=F,model=M",
        default=None,
        help="train over N*F*M devices: the batch split over data and fsdp, the parameters "
        "and optimizer state over fsdp, attention heads and MLPs over model (replaces the "
        "config's mesh section)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--allow-large",
        action="store_true",
        help="train even when the memory estimate exceeds the memory available",
    )
    add_compile_cache_option(parser)
    _add_process_options(parser)

    text = "evaluate a checkpoint on the test split of a config's data"
    parser = subparsers.add_parser("eval", help=text, description=text)
    parser.set_defaults(handler=_eval)
    parser.add_argument("file", metavar="FILE", help="the config the model was trained with")
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="KEY=VALUE",
        help="set a value by path, as for nnx train (e.g. data.path=other.npz)",
    )
    parser.add_argument("--checkpoint", **CHECKPOINT_OPTION)
    add_compile_cache_option(parser)


def _add_process_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "many processes (jax.distributed)",
        "Run the same command in every process; --mesh describes the global mesh over the "
        "devices of all of them. Process 0 writes the logs and commits the checkpoints.",
    )
    group.add_argument(
        "--coordinator",
        metavar="HOST:PORT",
        type=_coordinator,
        default=None,
        help="process 0's host and a free port ([::1]:PORT for an IPv6 address)",
    )
    group.add_argument(
        "--num-processes", metavar="N", type=_positive, default=None, help="how many processes"
    )
    group.add_argument(
        "--process-id", metavar="I", type=_index, default=None, help="this process: 0 .. N-1"
    )
    group.add_argument(
        "--distributed",
        action="store_true",
        help="join a multi-process run, letting JAX read what is not given from the environment "
        "(JAX_COORDINATOR_ADDRESS, Slurm, Open MPI, Kubernetes, Cloud TPU)",
    )
    group.add_argument(
        "--heartbeat-timeout",
        metavar="SECONDS",
        type=_positive,
        default=100,
        help="a process silent this long counts as dead and stops the others (default 100)",
    )


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def _index(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


def _coordinator(text: str) -> str:
    problem = address_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text[:80]!r}: {problem}")
    return text
