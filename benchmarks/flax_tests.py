"""flax.nnx's own code, run on nnx with only the import changed: how much of it passes.

Run (FLAX is a flax checkout, or its bare git directory with ``--rev COMMIT``):
    python benchmarks/flax_tests.py tests FLAX [--only rngs_test.py ...] [--failures]
    python benchmarks/flax_tests.py toys FLAX [--only 04 ...] [--repeat 20]
    python benchmarks/flax_tests.py real FLAX [--only view.md ...]
    (any mode: --peer runs flax itself on the same harness; --scratch DIR, --rev COMMIT)

Nothing of flax is copied into the project: the files are read from FLAX (or exported from
its git directory) into a scratch folder outside the project (default /tmp/nnx-flax-tests),
rewritten there, and run there. ``from flax import nnx`` (and the other forms flax's files use:
``from flax.nnx[.sub] import X``, ``import flax.nnx as nnx``, ``flax.nnx.X``) becomes one flat
namespace, ``_flat_nnx``, holding every public name of nnx_core, nnx_layers and nnx_plugins
(written into the scratch folder). Everything else (``flax.linen`` as a numerical oracle,
``flax.errors``, ``flax.struct``, ``flax.training``) stays flax's own.

- tests: flax's ``tests/nnx`` files named in issue 21 (its mode-flag, compat and Linen-bridge
  files left out), one pytest process per file with JAX_PLATFORMS=cpu; prints the per-file
  table (passed / total, where total is what flax itself collects) and the overall share.
- toys: flax's ``examples/nnx_toy_examples`` 02, 03, 04, 06, 07, 09 and 10, each run as a
  script (MPLBACKEND=Agg); ``--repeat N`` runs each N times in a row and counts completions.
- real: flax.nnx code beyond its tests: every executed code cell of the nnx guides
  (``docs_nnx``, each guide's cells in order in one interpreter, as a notebook runs them) and
  the test files of the Gemma example (``examples/gemma``), each item run by flax and by us;
  the share is of the items flax runs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

TEST_FILES = (
    "filters_test.py",
    "variable_test.py",
    "partitioning_test.py",
    "containers_test.py",
    "state_test.py",
    "rngs_test.py",
    "helpers_test.py",
    "module_test.py",
    "nn/stochastic_test.py",
    "nn/linear_test.py",
    "nn/conv_test.py",
    "nn/embed_test.py",
    "nn/normalization_test.py",
    "nn/attention_test.py",
    "nn/recurrent_test.py",
    "nn/lora_test.py",
    "metrics_test.py",
)
TOYS = ("02", "03", "04", "06", "07", "09", "10")
GUIDES = (
    "nnx_basics.md",
    "mnist_tutorial.md",
    "guides/checkpointing.md",
    "guides/demo.md",
    "guides/filters_guide.md",
    "guides/flax_gspmd.md",
    "guides/performance.md",
    "guides/pytree.md",
    "guides/surgery.md",
    "guides/transforms.md",
    "guides/view.md",
)
GEMMA = "examples/gemma"
FLAT = "_flat_nnx"
EXPORTED = ("tests/nnx", "examples/nnx_toy_examples", GEMMA, "docs_nnx", "flax/version.py")

FLAT_MODULE = '''"""One flat namespace over nnx_core, nnx_layers and nnx_plugins (written by flax_tests.py)."""
import nnx_core, nnx_layers, nnx_plugins

for _pkg in (nnx_plugins, nnx_layers, nnx_core):  # nnx_core's name wins a collision
    for _name in _pkg.__all__:
        globals()[_name] = getattr(_pkg, _name)
nn = nnx_layers
initializers = nnx_layers.initializers
'''


# ---------------------------------------------------------------------------------------------
# Source: a checkout, or a bare git directory exported file by file
# ---------------------------------------------------------------------------------------------


def export(git_dir: Path, rev: str, dest: Path) -> None:
    """Write the text files of ``EXPORTED`` at ``rev`` under ``dest`` (blobs a partial mirror
    lacks are skipped, which ``git archive`` cannot do)."""
    listing = subprocess.run(
        ["git", "-C", str(git_dir), "ls-tree", "-r", rev, "--", *EXPORTED],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    for line in listing.splitlines():
        meta, path = line.split("\t", 1)
        _, kind, sha = meta.split()
        if kind != "blob" or not path.endswith((".py", ".md", ".txt")):
            continue
        blob = subprocess.run(
            ["git", "-C", str(git_dir), "cat-file", "-p", sha], capture_output=True
        )
        if blob.returncode == 0:
            (dest / path).parent.mkdir(parents=True, exist_ok=True)
            (dest / path).write_bytes(blob.stdout)


def flax_source(path: Path, rev: str | None, scratch: Path) -> Path:
    if (path / "tests" / "nnx").is_dir():
        return path
    if rev is None:
        sys.exit(f"{path} has no tests/nnx: give a flax checkout, or its git directory and --rev")
    dest = scratch / f"flax-{rev[:12]}"
    if not (dest / "tests" / "nnx").is_dir():
        export(path, rev, dest)
    return dest


def flax_version(src: Path) -> str:
    found = re.search(r"__version__ = ['\"]([^'\"]+)", (src / "flax" / "version.py").read_text())
    return found.group(1) if found else "unknown"


# ---------------------------------------------------------------------------------------------
# The rewrite
# ---------------------------------------------------------------------------------------------


def _from_flax(match: re.Match) -> str:
    indent, names = match.group(1), [n.strip() for n in match.group(2).split(",")]
    kept = [n for n in names if n.split(" as ")[0].strip() != "nnx"]
    lines = [f"{indent}from flax import {', '.join(kept)}"] if kept else []
    for name in names:
        if name.split(" as ")[0].strip() == "nnx":
            alias = name.split(" as ")[1].strip() if " as " in name else "nnx"
            lines.append(f"{indent}import {FLAT} as {alias}")
    return "\n".join(lines)


def rewrite(text: str) -> str:
    """flax.nnx's import forms -> the flat namespace; every other flax import is kept."""
    text = re.sub(r"^([ \t]*)from flax import ([\w ,]+)$", _from_flax, text, flags=re.M)
    text = re.sub(
        r"^([ \t]*)from flax\.nnx(?:\.[\w.]+)? import", rf"\1from {FLAT} import", text, flags=re.M
    )
    text = re.sub(r"^([ \t]*)import flax\.nnx as", rf"\1import {FLAT} as", text, flags=re.M)
    if re.search(r"\bflax\.nnx\.", text):
        text = re.sub(r"\bflax\.nnx\.", f"{FLAT}.", text)
        text = f"import {FLAT}\n" + text
    return text


def stage(src: Path, names: list[str], dest: Path, *, peer: bool) -> list[Path]:
    """Copy ``names`` (relative to ``src``) into ``dest``, rewritten unless ``peer``."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / f"{FLAT}.py").write_text(FLAT_MODULE)
    (dest / "pytest.ini").write_text("[pytest]\n")  # keep the project's own settings out
    out = []
    for name in names:
        text = (src / name).read_text()
        target = dest / name.replace("/", "_")
        target.write_text(text if peer else rewrite(text))
        out.append(target)
    return out


def env(**extra: str) -> dict[str, str]:
    e = dict(os.environ, JAX_PLATFORMS="cpu", MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1")
    e.pop("PYTHONPATH", None)
    e.update(extra)
    return e


# ---------------------------------------------------------------------------------------------
# pytest files
# ---------------------------------------------------------------------------------------------


@dataclass
class FileResult:
    name: str
    passed: set[str] = field(default_factory=set)
    failed: dict[str, str] = field(default_factory=dict)  # item -> first line of its error
    total: int = 0


def run_pytest(path: Path, *, timeout: float) -> FileResult:
    xml = path.with_suffix(".xml")
    xml.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"]
    cmd += ["-p", "no:xdist", f"--junit-xml={xml}", "--tb=line", path.name]
    try:
        subprocess.run(cmd, cwd=path.parent, env=env(), capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pass
    result = FileResult(path.name)
    if not xml.exists():
        return result
    for case in ET.parse(xml).iter("testcase"):
        item = f"{case.get('classname', '').rpartition('.')[2]}::{case.get('name')}"
        bad = case.find("failure")
        bad = bad if bad is not None else case.find("error")
        if bad is not None:
            first = (bad.get("message") or bad.text or "").strip().splitlines()
            result.failed[item] = first[0][:160] if first else "?"
        elif case.find("skipped") is None:
            result.passed.add(item)
    result.total = len(result.passed) + len(result.failed)
    return result


def collected(files: list[Path]) -> dict[str, int]:
    """How many items flax itself collects in each (unrewritten) file."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly"]
        + ["-p", "no:cacheprovider", *(f.name for f in files)],
        cwd=files[0].parent,
        env=env(),
        capture_output=True,
        text=True,
    ).stdout
    counts = {f.name: 0 for f in files}
    for line in out.splitlines():
        head = line.split("::", 1)[0]
        if "::" in line and head in counts:
            counts[head] += 1
    return counts


def table(rows: list[tuple[str, int, int]], title: str) -> str:
    lines = [f"| {title} | passed | total | share |", "|---|---:|---:|---:|"]
    for name, passed, total in rows:
        lines.append(f"| {name} | {passed} | {total} | {100 * passed / max(total, 1):.0f}% |")
    p, t = sum(r[1] for r in rows), sum(r[2] for r in rows)
    lines.append(f"| **all** | **{p}** | **{t}** | **{100 * p / max(t, 1):.1f}%** |")
    return "\n".join(lines)


def causes(results: list[FileResult]) -> str:
    """Failures grouped by their error's first line (numbers and names masked)."""
    groups: dict[str, list[str]] = {}
    for r in results:
        for item, msg in r.failed.items():
            key = re.sub(r"0x[0-9a-f]+|\d+", "#", msg)[:110]
            groups.setdefault(key, []).append(f"{r.name}::{item}")
    ordered = sorted(groups.items(), key=lambda kv: -len(kv[1]))
    return "\n".join(f"{len(v):4d}  {k}\n        e.g. {v[0]}" for k, v in ordered)


def run_tests(src: Path, args: argparse.Namespace) -> None:
    names = [f for f in TEST_FILES if not args.only or Path(f).name in args.only]
    nnx_dir = src / "tests" / "nnx"
    totals = collected(stage(nnx_dir, names, args.scratch / "tests-flax", peer=True))
    files = stage(nnx_dir, names, args.scratch / "tests", peer=args.peer)
    results, rows = [], []
    for name, path in zip(names, files, strict=True):
        r = run_pytest(path, timeout=args.timeout)
        results.append(r)
        rows.append((name, len(r.passed), max(totals[path.name], r.total)))
        print(f"  {name:28s} {rows[-1][1]:4d} / {rows[-1][2]:4d}", file=sys.stderr, flush=True)
    print(table(rows, "flax tests/nnx file"))
    if args.failures:
        print("\nFailures by cause:\n" + causes(results))


# ---------------------------------------------------------------------------------------------
# toy scripts
# ---------------------------------------------------------------------------------------------


def run_script(path: Path, *, timeout: float) -> tuple[int, float, str]:
    """Exit status (124: timed out), seconds, last line of stderr."""
    t0 = time.perf_counter()
    try:
        p = subprocess.run(
            [sys.executable, path.name], cwd=path.parent, env=env(), capture_output=True,
            text=True, timeout=timeout,
        )  # fmt: skip
        rc, err = p.returncode, p.stderr
    except subprocess.TimeoutExpired:
        rc, err = 124, "timed out"
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    raised = [ln for ln in lines if re.match(r"[\w.]*(Error|Exception|Abort)\w*\b", ln)]
    last = (raised or lines or [f"exit status {rc}"])[-1]
    return rc, time.perf_counter() - t0, last[:200] if rc else ""


def run_toys(src: Path, args: argparse.Namespace) -> None:
    toy_dir = src / "examples" / "nnx_toy_examples"
    picked = [t for t in TOYS if not args.only or t in args.only]
    names = [next(p.name for p in toy_dir.glob(f"{t}_*.py")) for t in picked]
    files = stage(toy_dir, names, args.scratch / "toys", peer=args.peer)
    print("| toy example | runs to the end | seconds (median) | last error |")
    print("|---|---:|---:|---|")
    done_all = 0
    for name, path in zip(names, files, strict=True):
        runs = [run_script(path, timeout=args.timeout) for _ in range(args.repeat)]
        ok = sum(rc == 0 for rc, _, _ in runs)
        done_all += ok == args.repeat
        secs = sorted(s for _, s, _ in runs)[len(runs) // 2]
        error = next((e for rc, _, e in runs if rc), "")
        print(f"| {name} | {ok}/{args.repeat} | {secs:.1f} | {error} |", flush=True)
    print(f"\n{done_all} of {len(names)} scripts ran to the end every time")


# ---------------------------------------------------------------------------------------------
# real code: guide cells and the Gemma example's tests
# ---------------------------------------------------------------------------------------------

CELL_RUNNER = '''"""Runs a guide's cells in order in one namespace; one JSON line per cell."""
import contextlib, io, json, sys, traceback
cells = json.load(open(sys.argv[1]))
ns = {"__name__": "__main__"}
for i, code in enumerate(cells):
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(code, f"cell{i}", "exec"), ns)
        print(json.dumps([i, ""]), flush=True)
    except BaseException as e:  # a cell's failure is the measurement
        print(json.dumps([i, f"{type(e).__name__}: {e}".splitlines()[0][:160]]), flush=True)
'''


def cells_of(markdown: str) -> list[str]:
    """The code cells a notebook run executes (``skip-execution`` cells and magics left out)."""
    cells = []
    for block in re.findall(r"^```\{code-cell\}[^\n]*\n(.*?)^```", markdown, flags=re.M | re.S):
        if "skip-execution" in block.split("\n\n", 1)[0]:
            continue
        lines = [ln for ln in block.splitlines() if not ln.startswith((":", "%", "!"))]
        cells.append("\n".join(lines))
    return cells


def run_guide(src: Path, guide: str, dest: Path, *, peer: bool, timeout: float) -> dict[str, str]:
    cells = [c if peer else rewrite(c) for c in cells_of((src / "docs_nnx" / guide).read_text())]
    name = guide.replace("/", "_").removesuffix(".md")
    (dest / f"{name}.json").write_text(json.dumps(cells))
    (dest / "_cells.py").write_text(CELL_RUNNER)
    try:
        out = subprocess.run(
            [sys.executable, "_cells.py", f"{name}.json"], cwd=dest, env=env(),
            capture_output=True, text=True, timeout=timeout,
        ).stdout  # fmt: skip
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    seen = {f"{name}[{i}]": err for i, err in (json.loads(ln) for ln in out.splitlines() if ln)}
    return {f"{name}[{i}]": seen.get(f"{name}[{i}]", "did not run") for i in range(len(cells))}


def run_real_side(src: Path, args: argparse.Namespace, *, peer: bool) -> dict[str, dict[str, str]]:
    """Per group (a guide, the Gemma tests): item -> '' (ran) or its error."""
    dest = args.scratch / ("real-flax" if peer else "real")
    dest.mkdir(parents=True, exist_ok=True)
    (dest / f"{FLAT}.py").write_text(FLAT_MODULE)
    out = {}
    for guide in GUIDES:
        if not args.only or Path(guide).name in args.only:
            out[guide] = run_guide(src, guide, dest, peer=peer, timeout=args.timeout)
    if not args.only or "gemma" in args.only:
        gemma = src / GEMMA
        names = [p.name for p in sorted(gemma.glob("*.py"))]
        files = stage(gemma, names, dest / "gemma", peer=peer)
        items: dict[str, str] = {}
        for path in (f for f in files if f.name.endswith("_test.py")):
            r = run_pytest(path, timeout=args.timeout)
            items.update({f"{path.name}::{i}": "" for i in r.passed})
            items.update({f"{path.name}::{i}": err for i, err in r.failed.items()})
        out["examples/gemma (its tests)"] = items
    return out


def run_real(src: Path, args: argparse.Namespace) -> None:
    flax_side = run_real_side(src, args, peer=True)
    ours = flax_side if args.peer else run_real_side(src, args, peer=False)
    rows, failures = [], []
    for group, items in flax_side.items():
        runs_under_flax = [i for i, err in items.items() if not err]
        ok = [i for i in runs_under_flax if ours[group].get(i, "missing") == ""]
        rows.append((group, len(ok), len(runs_under_flax)))
        failures += [
            f"{i}: {ours[group].get(i, 'missing')}" for i in runs_under_flax if i not in ok
        ]
        print(
            f"  {group:34s} {len(ok):4d} / {len(runs_under_flax):4d}", file=sys.stderr, flush=True
        )
    print(table(rows, "flax.nnx code (items flax runs)"))
    if args.failures:
        print("\nFailures:\n" + "\n".join(failures))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("mode", choices=("tests", "toys", "real"))
    ap.add_argument("flax", type=Path, help="a flax checkout, or its git directory with --rev")
    ap.add_argument("--rev", help="the commit to export when FLAX is a git directory")
    ap.add_argument("--scratch", type=Path, default=Path("/tmp/nnx-flax-tests"))
    ap.add_argument("--only", nargs="*", help="file names (tests, real) or numbers (toys)")
    ap.add_argument("--peer", action="store_true", help="run flax itself, not rewritten")
    ap.add_argument("--failures", action="store_true", help="list what fails, by cause")
    ap.add_argument("--repeat", type=int, default=1, help="toys: runs of each script")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per file or script")
    args = ap.parse_args(argv)
    project = Path(__file__).resolve().parents[1]
    args.scratch = args.scratch.resolve()
    if args.scratch.is_relative_to(project):
        sys.exit(f"--scratch {args.scratch} is inside the project: flax's files stay outside it")
    src = flax_source(args.flax.resolve(), args.rev, args.scratch)
    subs = {"tests": ("tests", "tests-flax"), "toys": ("toys",), "real": ("real", "real-flax")}
    for sub in subs[args.mode]:
        shutil.rmtree(args.scratch / sub, ignore_errors=True)
    print(f"flax {flax_version(src)} from {args.flax}" + (f" @ {args.rev}" if args.rev else ""))
    print(
        f"run by {'flax itself' if args.peer else 'nnx (flat import)'}, {time.strftime('%Y-%m-%d')}\n"
    )
    {"tests": run_tests, "toys": run_toys, "real": run_real}[args.mode](src, args)


if __name__ == "__main__":
    main()
