"""``nnx config validate FILE... [KEY=VALUE...]``, ``nnx config show FILE [KEY=VALUE...]``,
``nnx config schema`` and ``nnx build FILE [KEY=VALUE...] [--summary]``.

An argument holding ``=`` that is not an existing file is an override (``train.epochs=5``),
applied to every FILE; overrides may also follow the options.

Example:
    >>> from nnx_plugins.cli._main import build_parser
    >>> build_parser().parse_args(["build", "m.yaml", "--summary"]).summary
    True
    >>> from nnx_plugins.cli._config import split_arguments
    >>> split_arguments(["m.yaml", "train.epochs=5", "model.layers[0].out_features=64"])
    (['m.yaml'], ['train.epochs=5', 'model.layers[0].out_features=64'])
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from typing import Any

from .._errors import NnxError
from ..config._errors import ConfigError
from ._output import add_command, console, fail, report, table

__all__ = ["add_commands", "split_arguments", "usage_error", "one_file"]


def split_arguments(arguments: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split positional arguments into files and ``KEY=VALUE`` overrides (in their order)."""
    files, overrides = [], []
    for argument in arguments:
        is_override = "=" in argument and not os.path.exists(argument)
        (overrides if is_override else files).append(argument)
    return files, overrides


def usage_error(command: str, message: str) -> int:
    """Print a usage error of ``nnx COMMAND`` on stderr; return the exit status 2."""
    report(f"usage: nnx {command}\nnnx: error: {message}")
    return 2


def one_file(args: argparse.Namespace, usage: str) -> tuple[str, list[str]] | None:
    """``(FILE, overrides)`` of a command taking one file; ``None`` after a usage error."""
    files, overrides = split_arguments([args.file, *args.overrides])
    if len(files) == 1:
        return files[0], overrides
    usage_error(usage, f"give one config FILE, then KEY=VALUE overrides; got files {files}.")
    return None


def _input_shape(text: str) -> tuple[int, ...]:
    """``8,8,1`` -> ``(8, 8, 1)``: one example's shape, without the batch axis."""
    try:
        shape = tuple(int(part) for part in text.split(","))
    except ValueError:
        shape = ()
    if not shape or any(size < 1 for size in shape):
        raise argparse.ArgumentTypeError(
            f"expected positive sizes separated by commas, e.g. 8,8,1 or 64; got {text!r}"
        )
    return shape


def _data_spec(args: argparse.Namespace) -> Any:
    if args.input_shape is None:
        return None
    import jax  # (here: the listing commands stay light)

    from ..config._shapes import DataSpec  # (here: the listing commands stay light)

    spelled = ",".join(map(str, args.input_shape))
    example = jax.ShapeDtypeStruct(args.input_shape, args.input_dtype)
    return DataSpec(example, f"input (--input-shape {spelled})")


def _config_validate(args: argparse.Namespace) -> int:
    from ..config._load import load_config  # (here: the listing commands stay light)
    from ..config._shapes import spell  # (here: the listing commands stay light)
    from ..training._validate import check_config  # (here: the listing commands stay light)
    from ..training.checkpoints._save import CheckpointError  # (here: listing stays light)

    files, overrides = split_arguments([*args.files, *args.overrides])
    if not files:
        return usage_error(
            "config validate FILE... [KEY=VALUE...]", "give at least one config FILE."
        )
    status = 0
    screen = console()
    data = _data_spec(args)
    for path in files:
        try:
            check = check_config(load_config(path, overrides=overrides), data=data)
        except (ConfigError, CheckpointError) as error:
            report(str(error))
            status = 1
            continue
        kind = check.config.model["type"]
        if check.data is None:
            screen.print(
                f"{path}: ok ({kind}); layers built abstractly; shapes not checked: give "
                "--input-shape or a data section",
                soft_wrap=True,
            )
        else:
            shapes = f"{spell(check.data.batch)} -> {spell(check.output)}"
            screen.print(
                f"{path}: ok ({kind}); {shapes} from the {check.data.origin}", soft_wrap=True
            )
    return status


def _config_show(args: argparse.Namespace) -> int:
    from ..config._load import load_config  # (here: the listing commands stay light)

    given = one_file(args, "config show FILE [KEY=VALUE...]")
    if given is None:
        return 2
    try:
        config = load_config(given[0], overrides=given[1])
    except ConfigError as error:
        report(str(error))
        return 1
    print(config.to_yaml(), end="")
    return 0


def _config_schema(args: argparse.Namespace) -> int:
    from ..config._schema import config_schema  # (here: the listing commands stay light)

    text = json.dumps(config_schema(), indent=2)
    if args.output:
        try:
            with open(args.output, "w", encoding="utf-8") as handle:
                handle.write(text + "\n")
        except OSError as error:
            return fail(f"cannot write {args.output}: {error}")
    else:
        print(text)
    return 0


def _build(args: argparse.Namespace) -> int:
    from ..config._load import load_config  # (here: the listing commands stay light)
    from ..config._summary import summarize  # (here: the listing commands stay light)
    from ..training._config import load_train_config  # (here: the listing commands stay light)

    given = one_file(args, "build FILE [KEY=VALUE...] [--summary] [--mesh ...]")
    if given is None:
        return 2
    try:
        loaded = load_config(given[0], overrides=given[1])
        config = load_train_config(loaded)
        summary = summarize(config)
        outputs = _layer_outputs(loaded, args) if args.summary else None  # (its own data only)
    except ConfigError as error:
        report(str(error))
        return 1
    screen = console()
    if args.summary:
        _print_summary(screen, given[0], summary, outputs)
    screen.print(
        f"total: {summary.total_count:,} values, {_human(summary.total_bytes)} "
        f"({summary.total_bytes:,} bytes)"
    )
    if args.mesh is not None or "mesh" in loaded.sections:
        return _device_memory(config, args, with_step="data" in loaded.sections)
    return _memory(config, summary.state, allow_large=args.allow_large)


def _human(nbytes: int) -> str:
    from ..training._memory import human_bytes  # (here: the listing commands stay light)

    return human_bytes(nbytes)


def _layer_outputs(config: Any, args: argparse.Namespace) -> Any:
    """Each layer's abstract output when the input is known (``--input-shape`` or the data
    section), else ``None``."""
    from ..config._shapes import check_model  # (here: the listing commands stay light)

    check = check_model(config, data=_data_spec(args))
    return check.outputs if check.data is not None else None


def _print_summary(screen: Any, name: str, summary: Any, outputs: Any) -> None:
    from ..config._summary import spell_output, with_outputs  # (here: listing stays light)

    layers = with_outputs(summary, outputs) if outputs is not None else summary.layers
    rows = [
        (
            layer.path,
            layer.type + (f" x{layer.blocks}" if layer.blocks > 1 else ""),
            spell_output(layer.output) if outputs is not None and layer.output is not None else "",
            layer.note
            or ", ".join(f"{v.name} {v.shape} {v.dtype} [{v.kind}]" for v in layer.variables),
            f"{layer.count:,}",
            _human(layer.nbytes),
        )
        for layer in layers
    ]
    columns = ("Layer", "Type", "Output", "Variables", "Count", "Bytes")
    screen.print(table(f"{name} (built abstractly, nothing allocated)", columns, rows))
    if outputs is None:
        screen.print(
            "output shapes: give --input-shape (one example's shape) or a data section",
            soft_wrap=True,
        )
    kinds = [(kind, f"{c:,}", _human(b)) for kind, (c, b) in sorted(summary.by_kind.items())]
    screen.print(table("per Variable kind", ("Kind", "Count", "Bytes"), kinds))


def _device_memory(config: Any, args: argparse.Namespace, *, with_step: bool) -> int:
    """Per device: the parameters, the optimizer state, and (with data) the train step's peak."""
    from ..training import _device_memory as device  # (here: the listing commands stay light)
    from ..training import _memory_report as planned  # (here: the listing commands stay light)
    from ..training._mesh import parse_mesh, run_layout  # (here: listing stays light)
    from ..training._run_dir import RunError  # (here: the listing commands stay light)

    try:
        layout = run_layout(config, None if args.mesh is None else parse_mesh(args.mesh))
        measure = planned.layout_step_memory if with_step else planned.layout_memory
        memory = measure(config, layout, allow_large=True)
    except RunError as error:
        return fail(str(error))
    except NnxError as error:
        report(str(error))
        return 1
    console().print(
        table(
            f"per device ({memory.mesh}, {memory.devices} devices)",
            ("", "Each device", f"All {memory.devices}"),
            device.memory_rows(memory),
        )
    )
    if not with_step:
        console().print("train step peak: not compiled (give the config a data section)")
    try:
        device.check_device_memory(memory, config, allow_large=args.allow_large)
    except ConfigError as error:
        report(str(error))
        return 1
    return 0


def _memory(config: Any, state: Any, *, allow_large: bool) -> int:
    from ..training import _memory as memory  # (here: the listing commands stay light)

    optimizer = config.sections["optimizer"]
    kinds = memory.trainable_kinds(optimizer.trainable)
    estimate = memory.estimate_memory(state, optimizer.make(), kinds)
    console().print(
        f"training needs at least {memory.human_bytes(estimate.total_bytes)} (Variables, gradients and "
        f"{optimizer.type} state; activations not counted)"
    )
    try:
        memory.check_memory(estimate, config, allow_large=allow_large)
    except ConfigError as error:
        report(str(error))
        return 1
    return 0


def _add_input_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--input-shape",
        type=_input_shape,
        default=None,
        metavar="N[,N...]",
        help="one example's shape without the batch axis, e.g. 8,8,1 (overrides the data section)",
    )
    parser.add_argument(
        "--input-dtype",
        default="float32",
        choices=("float32", "float16", "bfloat16", "int32", "int64"),
        help="the input's dtype with --input-shape (default float32)",
    )


_OVERRIDE_HELP = (
    "set a value by path, e.g. train.epochs=5 or model.layers[1].out_features=64 (VALUE is YAML)"
)


def add_commands(subparsers: Any) -> None:
    """Register ``config validate``, ``config show``, ``config schema`` and ``build``."""
    config = subparsers.add_parser(
        "config", help="validate configs, show the resolved config, print the schema"
    ).add_subparsers(dest="action", metavar="ACTION", required=True)
    validate = add_command(
        config,
        "validate",
        _config_validate,
        "validate config files; with an input shape (a data section or --input-shape), run "
        "the model abstractly and check every layer's input",
    )
    validate.add_argument(
        "files", nargs="+", metavar="FILE [KEY=VALUE]", help="config files, then overrides"
    )
    validate.set_defaults(overrides=[])
    _add_input_options(validate)
    show = add_command(
        config,
        "show",
        _config_show,
        "print the resolved config (includes merged, overrides and ${...} applied, defaults "
        "filled in) as YAML",
    )
    show.add_argument("file", metavar="FILE")
    show.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help=_OVERRIDE_HELP)
    schema = add_command(config, "schema", _config_schema, "print the JSON Schema of config files")
    schema.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    build = add_command(subparsers, "build", _build, "build a config abstractly (no allocation)")
    build.add_argument("file", metavar="FILE")
    build.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help=_OVERRIDE_HELP)
    build.add_argument(
        "--summary",
        action="store_true",
        help="each layer's output shape (when the input is known), Variables, counts and bytes; "
        "the totals per Variable kind",
    )
    _add_input_options(build)
    build.add_argument(
        "--mesh",
        metavar="data=N,fsdp=F,model=M",
        default=None,
        help="what each device of this mesh holds: parameters, optimizer state and the "
        "compiled train step's peak (replaces the config's mesh section)",
    )
    build.add_argument(
        "--allow-large",
        action="store_true",
        help="exit 0 even when training would need more memory than is available",
    )
