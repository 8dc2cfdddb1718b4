"""Suites as data: load a YAML file, validate it completely before anything runs, expand it into cells.

A suite's ``kind`` (:mod:`harness.kinds`: ``speed``, the default, ``accuracy``, ``approximation``, ``forecasting``,
``decode``) decides its axes, its own top-level keys and ``report`` keys, and how its cells run and are reported; a
key of another kind is an error. The speed and accuracy files below are examples; each kind's module documents its
own (``harness/kinds/<kind>/kind.py``).

A speed suite file::

    name: speed
    description: time, peak memory and FLOPs of each variant against sequence length
    axes:                       # every combination is one cell
      attention: [vanilla, vanilla_sdpa, "s3attention*"]   # names or fnmatch patterns
      seq_len: [256, 1024]
      batch_size: [4]
      heads: [2]
      dim: [64]
      mode: [fwd, fwd+bwd]      # fwd | fwd+bwd | train_step
      dtype: [float32]          # float32 | bfloat16 | float16
    config: {dropout: 0.1}      # config overrides for every attention (validated per attention)
    attention_config:           # overrides for the attentions matching a pattern (applied after `config`)
      "s3attention*": {r: 8}
    fixed: {layers: 2}          # task settings (train_step encoder depth, MLP width, vocab, classes, seed)
    metrics: [time, memory, flops]
    timing: {min_run_time_s: 1.0, min_repeats: 5, warmup: 2, flush_l2: false}   # flush_l2: CUDA only
    skip:                       # cells recorded as `unsupported` without running
      - {when: {attention: "vanilla*", seq_len: {gt: 8192}}, reason: "n^2 memory exceeds 24 GiB"}
    report: {baseline: vanilla, slope_min_seq_len: 1024}
    profiles:                   # each profile overrides top-level keys; axes, config, fixed, timing and report
                                # are merged key by key
      smoke: {axes: {seq_len: [64, 128]}, timing: {min_run_time_s: 0.01, min_repeats: 2, warmup: 1}}
      quick: {}
      paper: {...}

A suite file is UTF-8 YAML, loaded safely (no Python tags); a key may appear once per mapping. Anchors, aliases and
merge keys (``timing: {<<: *base_timing, warmup: 0}``) work, within bounds that refuse alias bombs and deep nesting
(:data:`MAX_VALUES`, :data:`MAX_DEPTH`). The suite's name and each profile's name are folders of the output path
(``<out>/<suite>/<profile>``): letters, digits, '-' and '_', at most 255 bytes. An integer with a leading zero
(``064``, which YAML 1.1 reads as octal 52) is refused: write ``64``, or ``"064"`` for text. Values given with
``--set`` replace the profile's axes (an axis given twice takes the values of both) and are checked like them; their
errors name ``--set``.

An accuracy suite file::

    name: accuracy
    kind: accuracy
    axes: {attention: [vanilla, s3attention], task: [listops, text, retrieval, image, pathfinder], seed: [0, 1]}
    data: {dir: null, seed: 0, sizes: [2000, 200, 200]}   # dir null = offline generators; --data-dir overrides
    train: {steps: 300, batch_size: 32, lr: 1.0e-4, eval_every: 50, checkpoint_every: 50}   # TrainConfig fields
    tasks:                      # per task: sequence length, training settings, attention config, generator params
      listops: {seq_len: 2000, train: {lr: 1.0e-4}, config: {dropout: 0.0}, gen: {max_depth: 10}}
    profiles: {smoke: {...}, quick: {...}, paper: {...}}

Optional axes and keys of accuracy suites (the paper's studies):

- ``noise: [0, 2, 4, 8]`` and ``noise_on: [train+test, test]``: U(-a, a) pixel noise (Table 5; see
  :func:`harness.kinds.accuracy.noise.add_pixel_noise`). A clean cell (a = 0) is the same whatever ``noise_on`` says,
  so it is stored once, as ``noise_on: train+test``, and both modes' tables read it.
- ``variants``: named config overrides applied last (after ``config``, ``attention_config`` and the task's), and a
  ``variant`` axis choosing among them (default: all, in file order). Either a mapping ``label: {field: value}``
  or the one-at-a-time grid of Table 6::

      variants:
        one_at_a_time:
          base: {r: 8, s1: 8, s2: 8}
          vary: {r: [1, 8, 16, 32, 64], s1: [8, 32, 64, 128, 256], s2: [1, 4, 8, 16, 32]}

  which expands to ``base`` and one variant per other value, labelled ``r=1``, ``s1=32``, ... (13 models; the base
  value of each parameter is the ``base`` model itself).
- ``incoherence: {ranks: [16, 32], layer: 0, max_examples: 0}``: after training, measure μ-incoherence before and
  after the Fourier convolution on the dev split (Table S7; :mod:`harness.kinds.accuracy.incoherence`).
- ``report.tables``: which of table1, table5, table6, table7, tableS7 to write (default: table1);
  ``report.baseline_variant``: the variant the ablation and sweep tables compare against (default ``base``).
"""

from __future__ import annotations

import copy
import stat
from collections.abc import Hashable
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from ..core.errors import SuiteError, first_line
from ..core.skip import validate_skip
from ..core.suite import (
    COMMON_KEYS,
    PROFILES_REQUIRED,
    REPORT_DEFAULTS,
    REPORT_RULES,
    Suite,
    SuiteKind,
    check_keys,
    mapping,
    validate_attention_config,
    validate_axes,
    validate_fields,
    validate_tables,
)
from ..kinds import DEFAULT_KIND, KINDS
from .overrides import CONFIG_PREFIX, is_config_field, unknown_axis

#: The longest file name most file systems take (ext4, APFS, NTFS: 255 bytes); the suite and profile names are folders.
MAX_NAME_BYTES = 255
#: What a suite file may make the loader build. A real suite nests a handful of levels and holds a few hundred values;
#: past these bounds it is a mistake or an attack (a billion-laughs alias bomb of ~850 bytes expands to 10^9 values and
#: hangs whatever walks it; a 50,000-deep ``[[[...]]]`` overflows Python's stack).
MAX_DEPTH = 100
MAX_VALUES = 100_000


def load_suite(
    path: str | Path,
    profile: str = "quick",
    overrides: dict[str, list[Any]] | None = None,
    data_dir: str | Path | None = None,
) -> Suite:
    """Read, validate and resolve a suite file for one profile; every problem is a SuiteError (exit 2).

    Args:
        path: the YAML file.
        profile: name of a profile in the file.
        overrides: axis -> values from the command line (``--set seq_len=1024,2048``); replace the profile's.
        data_dir: real data directory for a suite of a kind that reads data (``--data-dir``); replaces ``data.dir``.
    """
    path = Path(path)
    doc = _read(path)
    name = doc.get("name", path.stem)
    _check_name(path, "name", name)
    overrides = dict(overrides or {})
    chosen = _profile(path, doc, profile)
    try:
        return _resolve(path, doc, profile, chosen, dict(overrides), data_dir)
    except SuiteError as exc:
        raise _attributed(exc, path, profile, chosen, overrides) from None


def _attributed(exc: SuiteError, path: Path, profile: str, chosen: dict[str, Any],
                overrides: dict[str, list[Any]]) -> SuiteError:
    """``exc`` naming where the bad value was written: a key the profile sets is ``profiles.P.KEY``, an attention
    config field given with ``--set config.FIELD`` is that flag, not the file's ``config``."""
    if exc.path != path or not exc.key:
        return exc
    given = {k[len(CONFIG_PREFIX):]: v[0] for k, v in overrides.items() if k.startswith(CONFIG_PREFIX)}
    if exc.key == "config" and (field := next((f for f in given if f in exc.problem), None)):
        return SuiteError("--set", f"{CONFIG_PREFIX}{field}={given[field]}", exc.problem)
    node: Any = chosen
    for part in exc.key.split("."):
        if not isinstance(node, dict) or part not in node:
            return exc
        node = node[part]
    return SuiteError(path, f"profiles.{profile}.{exc.key}", exc.problem)


def _resolve(path: Path, doc: dict[str, Any], profile: str, chosen: dict[str, Any], overrides: dict[str, list[Any]],
             data_dir: str | Path | None) -> Suite:
    """The suite of ``doc`` under its profile ``chosen`` and the command line's overrides, validated."""
    name = doc.get("name", path.stem)
    merged = _merge(doc, chosen)
    kind = _kind(path, merged)
    _check_kind_keys(path, merged, kind)
    for axis in overrides:
        if not is_config_field(axis) and axis not in kind.all_axes():
            raise unknown_axis(axis, kind.name, list(kind.all_axes()))
    config = {k[len(CONFIG_PREFIX):]: overrides.pop(k)[0] for k in list(overrides) if is_config_field(k)}
    if config:  # --set config.FIELD=VALUE: over the file's config, under its attention_config patterns
        merged["config"] = {**mapping(path, "config", merged.get("config")), **config}
    if overrides:  # validated with the file's axes, but their errors name --set (see validate_axes)
        merged["axes"] = {**mapping(path, "axes", merged.get("axes")), **overrides}
    if data_dir is not None:
        if not kind.reads_data:
            names = [k.name for k in KINDS.values() if k.reads_data]
            readers = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
            raise SuiteError("--data-dir", str(data_dir),
                             f"only {readers} suites read data; {path} is a {kind.name} suite")
        merged["data"] = {**mapping(path, "data", merged.get("data")), "dir": str(Path(data_dir).resolve())}
    settings = kind.parse(path, merged)  # before the axes: it may add default axes (every variant)
    report = validate_fields(path, "report", merged.get("report"),
                             {**REPORT_DEFAULTS, **{k: default for k, (default, _) in kind.report_keys.items()}},
                             {**REPORT_RULES, **{k: rule for k, (_, rule) in kind.report_keys.items()}})
    axes = validate_axes(path, merged.get("axes"), kind, from_flag=set(overrides or ()))
    suite = Suite(
        name=name, path=path, profile=profile, description=str(doc.get("description", "")), kind=kind, axes=axes,
        config=mapping(path, "config", merged.get("config")),
        attention_config=validate_attention_config(path, merged.get("attention_config")),
        skip=validate_skip(path, merged.get("skip"), kind.all_axes(), axes), report=report, settings=settings,
    )
    validate_tables(suite)
    _check_backend(suite)
    kind.validate(suite)
    return suite


def _check_backend(suite: Suite) -> None:
    """A suite-wide ``config.backend`` that some attentions lack leaves their cells unsupported
    (:meth:`Suite.backend_reason`); one that no attention on the axis has is a typo, refused before anything runs."""
    if "backend" not in suite.config:
        return
    reasons = [suite.backend_reason(name) for name in suite.attentions()]
    if reasons and all(reasons):
        raise SuiteError(suite.path, "config.backend", f"no attention on the axis has backend "
                                                        f"{suite.config['backend']!r}: {reasons[0]}")


def _read(path: Path) -> dict[str, Any]:
    """The suite file as a mapping, with its top-level keys and profiles checked."""
    try:
        mode = path.stat().st_mode
        if stat.S_ISDIR(mode):
            raise SuiteError(path, "", "a directory, not a suite file; give a YAML file, e.g. suites/speed.yaml")
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        raise SuiteError(path, "", "no such suite file; give a path such as suites/speed.yaml") from None
    except OSError as exc:  # a name too long, no permission, a device: the path is wrong, not the disk
        raise SuiteError(path, "", f"cannot be read as a suite file ({exc.strerror or exc}); give a path such as "
                                   f"suites/speed.yaml") from None
    try:
        # Not the locale's encoding: the same file must read the same on every machine.
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, byte = data[: exc.start].count(b"\n") + 1, data[exc.start]
        raise SuiteError(path, f"line {line}", f"not UTF-8 text (byte {byte:#04x}); save it as UTF-8") from None
    try:
        # Safe loading only: a suite file must never construct Python objects.
        doc = yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "YAML"
        problem = getattr(exc, "problem", None) or first_line(exc)
        if isinstance(exc, _Refused):
            raise SuiteError(path, where, f"{problem}; {exc.fix}") from None
        fix = ("suite files are plain YAML: remove the tag" if "constructor for the tag" in problem
               else "fix the syntax")
        raise SuiteError(path, where, f"not valid YAML ({problem}); {fix}") from None
    if not isinstance(doc, dict):
        raise SuiteError(path, "", f"the document must be a mapping of keys, got {type(doc).__name__}")
    _check_any_kind_keys(path, "", doc, doc.get("kind", DEFAULT_KIND))
    return doc


def _profile(path: Path, doc: dict[str, Any], profile: str) -> dict[str, Any]:
    """The overrides of ``profile``; every profile of the file is checked, and smoke, quick, paper must exist."""
    profiles = doc.get("profiles") or {}
    if not isinstance(profiles, dict):
        raise SuiteError(path, "profiles", "must be a mapping of profile name -> overrides")
    missing = [p for p in PROFILES_REQUIRED if p not in profiles]
    if missing:
        raise SuiteError(
            path, "profiles", f"missing profile(s) {', '.join(missing)}; every suite needs smoke, quick, paper"
        )
    for pname, pdoc in profiles.items():
        _check_name(path, f"profiles.{pname}", pname)  # results go to <out>/<suite>/<profile>
        if not isinstance(pdoc, dict | type(None)):
            raise SuiteError(path, f"profiles.{pname}", "must be a mapping (or empty)")
        kind = (pdoc or {}).get("kind", doc.get("kind", DEFAULT_KIND))
        _check_any_kind_keys(path, f"profiles.{pname}", pdoc or {}, kind, drop={"name", "profiles"})
    if profile not in profiles:
        raise SuiteError(path, "profiles", f"unknown profile {profile!r}; choose one of {', '.join(profiles)}")
    return profiles[profile] or {}


@cache
def _every_kind_keys() -> frozenset[str]:
    """Every top-level key of any kind (imports every kind: only a file with a key its own kind lacks asks)."""
    return frozenset(COMMON_KEYS.union(*(kind.keys for kind in KINDS.values())))


def _check_any_kind_keys(path: Path, where: str, doc: dict[str, Any], kind: Any,
                         drop: frozenset[str] | set[str] = frozenset()) -> None:
    """Every key of ``doc`` (the file's top level or a profile) is common or of some kind. The suite's own ``kind``
    is asked first, so that checking a valid file imports no other kind; :func:`_check_kind_keys` then admits only
    the suite's own."""
    own = KINDS[kind].keys if isinstance(kind, str) and kind in KINDS else frozenset()
    if not set(doc) <= (COMMON_KEYS | own) - drop:
        check_keys(path, where, doc, _every_kind_keys() - drop)


def _check_kind_keys(path: Path, doc: dict[str, Any], kind: SuiteKind) -> None:
    """Every top-level key is common or of the suite's own kind; a key of another kind says which."""
    for key in [k for k in doc if k not in COMMON_KEYS | kind.keys]:
        owner = next((k.name for k in KINDS.values() if key in k.keys), None)
        if owner:
            raise SuiteError(path, key, f"only {owner} suites have this key; this is a {kind.name} suite: remove the "
                             f"key or set `kind: {owner}`")
    check_keys(path, "", doc, COMMON_KEYS - {"profiles"} | kind.keys)


def _check_name(path: Path, key: str, name: Any) -> None:
    """``name`` can be one folder of an output path: never ``..``, a separator or an absolute path, nor too long."""
    if not isinstance(name, str):
        raise SuiteError(path, key, f"{name!r} must be text (letters, digits, '-' or '_'; it names the output folder); "
                                    f"quote it: {key.rsplit('.', 1)[-1]}: \"{name}\"")
    if not name.replace("_", "").replace("-", "").isalnum():
        raise SuiteError(path, key, f"{name!r} must be letters, digits, '-' or '_' (it names the output folder)")
    if len(name.encode()) > MAX_NAME_BYTES:
        raise SuiteError(path, key, f"{len(name.encode())} bytes long, more than a folder name may have "
                         f"({MAX_NAME_BYTES}); shorten it")


def _kind(path: Path, doc: dict[str, Any]) -> SuiteKind:
    kind = doc.get("kind", DEFAULT_KIND)
    if not isinstance(kind, str) or kind not in KINDS:
        raise SuiteError(path, "kind", f"unknown kind {kind!r}; choose one of {', '.join(KINDS)}")
    return KINDS[kind]


_MERGE_TAG = "tag:yaml.org,2002:merge"


class _Refused(yaml.composer.ComposerError):
    """Well-formed YAML the loader will not build (see :class:`_UniqueKeyLoader`); ``fix`` says what to change."""

    def __init__(self, problem: str, mark: yaml.Mark | None, fix: str) -> None:
        super().__init__(None, None, problem, mark)
        self.fix = fix


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` (never constructs Python objects) that refuses a key given twice in one mapping, and a
    document nested deeper than :data:`MAX_DEPTH` or holding more than :data:`MAX_VALUES` values once its aliases are
    expanded, or an alias inside its own anchor (a cycle).

    Plain PyYAML keeps the last of duplicate keys silently, so ``axes: {seq_len: [1024], seq_len: [2048]}`` would
    sweep one of them without a word. The bounds are checked while composing, before anything is expanded: an alias
    costs the size of what it names, computed once per node, so a bomb is refused after a few of its lines.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._shape: dict[int, tuple[int, int]] = {}  # id(node) -> (values once expanded, levels of nesting)
        # id(mapping node) -> the key nodes written in it: `<<` merges add keys in place, and those may repeat
        self._explicit: dict[int, list[yaml.Node]] = {}

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            node = super().compose_node(parent, index)
            if id(node) not in self._shape:  # its anchor's node is still being composed: the alias is inside it
                raise _Refused(f"alias *{event.anchor} inside the node it names (a cycle)", event.start_mark,
                               "remove the alias: a suite is a tree")
            return node
        self._depth += 1
        if self._depth > MAX_DEPTH:  # before recursing further: composing is recursive
            raise _Refused(f"nested more than {MAX_DEPTH} levels deep", self.peek_event().start_mark,
                           "flatten it (a suite needs a few levels)")
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if isinstance(node, yaml.MappingNode):
            self._explicit[id(node)] = [k for k, _ in node.value if k.tag != _MERGE_TAG]
            children = [n for pair in node.value for n in pair]
        else:
            children = node.value if isinstance(node, yaml.SequenceNode) else []
        values = 1 + sum(self._shape[id(c)][0] for c in children)
        depth = 1 + max((self._shape[id(c)][1] for c in children), default=0)
        if values > MAX_VALUES:
            raise _Refused(f"aliases expand to more than {MAX_VALUES} values", node.start_mark,
                           "write the values out instead of nesting aliases")
        if depth > MAX_DEPTH:
            raise _Refused(f"aliases nest more than {MAX_DEPTH} levels deep", node.start_mark,
                           "flatten it (a suite needs a few levels)")
        self._shape[id(node)] = (values, depth)
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        # `<<: *base` (a YAML merge key) brings base's keys in; a key written here wins over a merged one, so only the
        # keys written here must be distinct
        self.flatten_mapping(node)
        seen: set[Any] = set()
        for key_node in self._explicit[id(node)]:  # composing the whole document came first
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                continue  # the base class refuses it ("found unhashable key")
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (each key once per mapping)", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        # YAML 1.1 (PyYAML's) reads 064 as octal 52: a seq_len or a seed silently other than the one written
        digits = node.value.replace("_", "").lstrip("+-")
        if len(digits) > 1 and digits[0] == "0" and digits[1] not in "xb":
            raise _Refused(f"{node.value} is an integer with a leading zero, which YAML reads as octal "
                           f"({super().construct_yaml_int(node)})", node.start_mark,
                           f"write {int(node.value.replace('_', ''))} (or \"{node.value}\" for text)")
        return super().construct_yaml_int(node)


_UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", _UniqueKeyLoader.construct_yaml_int)


#: A profile's list that starts with this item extends the list it overrides instead of replacing it.
EXTEND = "..."


def _merge(base: dict[str, Any], prof: dict[str, Any]) -> dict[str, Any]:
    """A profile over the top level: mappings merge key by key (recursively), a list that starts with ``"..."``
    extends the base's list (``attention: ["...", "*_flex"]``: the base's variants, then these), anything else is
    replaced."""
    out = copy.deepcopy({k: v for k, v in base.items() if k != "profiles"})
    for k, v in prof.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        elif isinstance(v, list) and v[:1] == [EXTEND] and isinstance(out.get(k), list):
            out[k] = out[k] + copy.deepcopy(v[1:])
        else:
            out[k] = copy.deepcopy(v)
    return out


def parse_set(items: list[str]) -> dict[str, list[Any]]:
    """``["seq_len=1024,2048", "mode=fwd"]`` -> {"seq_len": [1024, 2048], "mode": ["fwd"]} (YAML scalars, read as in a
    suite file); an axis given twice sweeps the values of both; a ``config.FIELD=VALUE`` item keeps its key and its
    one value (a config field is set, not swept), and may be given once. Whether the suite's kind has each axis is
    :func:`load_suite`'s to check, once the kind is known (and, before torch, :mod:`harness.run.overrides`')."""
    out: dict[str, list[Any]] = {}
    for item in items:
        axis, sep, raw = item.partition("=")
        if not sep or not axis or not raw:
            raise SuiteError("--set", item, "expected AXIS=V1,V2,... e.g. --set seq_len=1024,2048")
        if is_config_field(axis):
            if "," in raw:
                raise SuiteError("--set", axis, "takes one value: a config field is set for the run, not swept "
                                                "(sweep it with `variants` in a suite file)")
            if axis in out:
                raise SuiteError("--set", axis, f"given twice ({out[axis][0]!r} and {_scalar(item, raw)!r}): a "
                                                f"config field takes one value; give it once")
        out.setdefault(axis, []).extend(_scalar(item, v) for v in raw.split(","))
    return out


def _scalar(item: str, text: str) -> Any:
    """One value of ``--set``, a YAML scalar read by the suite files' loader (so 064 is refused there too)."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except _Refused as exc:
        raise SuiteError("--set", item, f"{exc.problem}; {exc.fix}") from None
    except yaml.YAMLError:
        raise SuiteError("--set", item, "values must be plain scalars, e.g. --set seq_len=1024,2048") from None
