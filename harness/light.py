"""The commands that answer without importing torch: ``list`` (from the registry's catalogue,
:mod:`harness.catalog`), ``show`` (:mod:`harness.show`) and ``env`` for a CPU build of torch
(:func:`harness.core.envinfo.collect_cpu_env`). :mod:`harness.cli` runs them before anything heavy is imported;
everything else is :mod:`harness.commands`.
"""

from __future__ import annotations

import argparse
import difflib
import fnmatch
import importlib.util
import json
import os
import re
import shutil
import sys
import textwrap
from pathlib import Path

from .catalog import entries, is_fresh
from .core.envinfo import collect_cpu_env, torch_build
from .core.errors import UserError, printable
from .show import show

#: ``list`` stays within this many columns (a terminal, a paper's code listing).
LIST_WIDTH = 100
_CPU = re.compile(r"cpu(:\d+)?")


def _devices(entry: dict) -> str:
    devices = ",".join(entry["devices"])
    return f"{devices}+{entry['requires']}" if entry.get("requires") else devices


#: link prefix -> the short identifier papers cite it by (arXiv:ID, the ACL Anthology's ACL:ID)
_CITED_AS = {"arxiv.org/abs/": "arXiv:", "aclanthology.org/": "ACL:"}


def _paper(link: str) -> str:
    """``arXiv:2106.13008`` or ``ACL:2022.acl-long.19`` for those archives, else the link without its scheme."""
    bare = link.removeprefix("https://").removeprefix("http://").rstrip("/")
    return next((short + bare.removeprefix(prefix) for prefix, short in _CITED_AS.items() if bare.startswith(prefix)),
                bare)


def cmd_list(args: argparse.Namespace) -> int:
    """The registered attentions matching ``args.pattern``: capabilities, devices and paper, ≤ 100 columns."""
    if not is_fresh():
        print("attnbench: note: the zoo's catalogue is out of date (attentions/*.py changed since it was written): "
              "listing from the registry, which takes seconds; run `make catalog`", file=sys.stderr)
    found = entries()
    names = [e["name"] for e in found]
    rows = [e for e in found if fnmatch.fnmatchcase(e["name"], args.pattern)]
    if not rows:
        close = difflib.get_close_matches(args.pattern, names, n=3)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise UserError(f"list {args.pattern!r}: matches no registered attention; {hint}`attnbench list` shows all")
    yes = {True: "yes", False: "no"}
    table = [("name", "scaling", "exact", "mask", "fixed", "causal", "devices", "paper")]
    table += [(e["name"], e["complexity"], yes[e["exact"]], yes[e["supports_mask"]], yes[e["needs_fixed_length"]],
               _causal(e), _devices(e), _paper(e["paper"])) for e in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    # two spaces after the name and the scaling ("n log n" holds spaces), one between the short columns: 100 columns
    # with the longest preset name (sparse_transformer_strided_flex)
    gaps = ["  ", "  ", " ", " ", " ", " ", " ", ""]
    for r in table:
        print("".join(v.ljust(w) + gap for v, w, gap in zip(r, widths, gaps, strict=True)).rstrip())
    if len(rows) <= NOTES_UP_TO:  # a few variants: why each has (or has not) a causal form, and its decoding state
        for e in rows:
            print(f"\n{e['name']} ({e.get('display') or e['name']}, {e.get('group', 'other')}):")
            print(_wrapped(f"causal: {yes[bool(e.get('causal'))]}: {e.get('causal_note', '')}", "  "))
            if e.get("causal"):
                print(_wrapped(f"decode: {yes[bool(e.get('decode'))]}: {e.get('decode_note', '')}", "  "))
    else:
        print("\n" + _wrapped("causal: `decode` = a causal form that decodes (prefill, then one token at a time); "
                              "`attnbench list NAME` says why a variant has no causal form, or what its state is."))
    print("\n" + _wrapped(f"This machine: {_machine()}."))
    return 0


#: ``list`` prints each variant's causal and decoding notes when its pattern matches at most this many.
NOTES_UP_TO = 3


def _wrapped(text: str, indent: str = "") -> str:
    """``text`` in lines of at most :data:`LIST_WIDTH` characters (the listing's width)."""
    return textwrap.fill(text, width=LIST_WIDTH, initial_indent=indent, subsequent_indent=indent + "  ")


def _causal(entry: dict) -> str:
    if not entry.get("causal"):
        return "no"
    return "decode" if entry.get("decode") else "yes"


def _machine() -> str:
    """What decides the devices column here, found without torch: an NVIDIA driver, and the optional packages the
    variants require."""
    gpu = "an NVIDIA driver (cuda)" if os.path.exists("/proc/driver/nvidia/version") else "no NVIDIA driver (cpu only)"
    required = sorted({e["requires"] for e in entries() if e.get("requires")})
    have = [f"{r} {'installed' if importlib.util.find_spec(r) else 'not installed'}" for r in required]
    return ", ".join([gpu, *have])


def cmd_show(args: argparse.Namespace) -> int:
    """What the stores under ``args.dir`` hold, line by line with control characters escaped: a stored command line
    or path quotes input."""
    print("\n".join(printable(line) for line in show(args.dir).splitlines()))
    return 0


def cpu_env_answers(args: argparse.Namespace) -> bool:
    """Whether ``env`` can answer without torch: a CPU device (given, or the default on a machine without an NVIDIA
    driver) and a torch built without CUDA."""
    device = args.device
    if device is None:
        device = "cuda" if os.path.exists("/proc/driver/nvidia/version") else "cpu"
    return bool(_CPU.fullmatch(device)) and torch_build()["cuda"] is None and torch_build()["version"] is not None


def default_cpu_threads() -> int:
    """A CPU run's intra-op threads when --threads is not given: every core this process may use but one (see
    :func:`harness.commands.default_threads`)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores - 1)


def cmd_env(args: argparse.Namespace) -> int:
    """The CPU environment block a run would store (its threads: the run's default)."""
    print(json.dumps(collect_cpu_env(threads=default_cpu_threads()), indent=2))
    return 0


def attnbench_command() -> str:
    """How to type this program in the shell that ran it, for the hints a command prints: ``attnbench`` where that
    name on PATH is this installation's script; else the script's path, relative where it lies below the working
    directory (``.venv/bin/attnbench``: ``make setup`` installs it there and the Makefile calls it by that path, so
    after ``make bench-speed`` a bare ``attnbench`` is "command not found" until ``source .venv/bin/activate``)."""
    script = Path(sys.executable).parent / "attnbench"
    found = shutil.which("attnbench")
    if not script.is_file() or (found and os.path.realpath(found) == os.path.realpath(script)):
        return "attnbench"
    here = Path.cwd()
    return str(script.relative_to(here)) if here != Path(here.anchor) and script.is_relative_to(here) else str(script)


#: ``args.func`` -> the torch-free command
COMMANDS = {"cmd_list": cmd_list, "cmd_show": cmd_show, "cmd_env": cmd_env}
