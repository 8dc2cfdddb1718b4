"""Tests of harness.cli: list, env, report, and bad flags (exit code 2, one line on stderr)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
import torch

import attentions
from harness.cli import CACHE_DIRS
from harness.core.store import Store
from harness.run.suitefile import load_suite
from tests.conftest import REPO_ROOT, CliResult, tiny_doc

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")


def _one_error_line(result: CliResult, *needles: str) -> str:
    assert result.code == 2, result.err
    assert len(result.err_lines) == 1, result.err
    line = result.err_lines[0]
    assert line.startswith("attnbench: error: ")
    for needle in needles:
        assert needle in line
    return line


# ---------------------------------------------------------------------------------------------------
# list, env


def test_list_shows_every_attention(cli: Callable[..., CliResult]) -> None:
    result = cli("list")
    assert result.code == 0 and result.err == ""
    lines = result.out.splitlines()
    table = lines[1:lines.index("")]  # the rows, then a blank line and the notes
    rows = {line.split()[0]: line.split() for line in table}
    assert set(rows) == set(attentions.list_attentions())
    causal = {n: "decode" if attentions.spec(n).caps.decode else "yes" if attentions.spec(n).caps.causal else "no"
              for n in rows}
    assert {n: row[-3] for n, row in rows.items()} == causal  # the causal column: third from the right
    assert rows["vanilla"][2] == "yes" and rows["vanilla"][-1] == "arXiv:1706.03762"
    assert rows["fsat"][-1] == "ACL:2022.acl-long.19" and rows["linformer"][2] == "no"
    assert max(len(line) for line in lines) <= 100  # a terminal, a listing in a paper


def test_list_names_what_decides_availability(cli: Callable[..., CliResult]) -> None:
    out = cli("list").out
    line = next(x for x in out.splitlines() if x.startswith("vanilla_xformers "))
    assert "cuda+xformers" in line and "cpu" not in line
    assert out.splitlines()[-1].startswith("This machine: ") and "xformers" in out.splitlines()[-1]


def test_list_pattern(cli: Callable[..., CliResult]) -> None:
    result = cli("list", "s3*")
    lines = result.out.splitlines()
    assert [line.split()[0] for line in lines[1:lines.index("")]] == attentions.list_attentions("s3*")
    # two variants: each one's causal note (S3Attention's Fourier convolution mixes the whole sequence)
    assert "s3attention (S3Attention, low rank):" in lines and any("Fourier convolution" in x for x in lines)


def test_list_says_when_its_catalogue_is_out_of_date(cli: Callable[..., CliResult],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("harness.light.is_fresh", lambda: False)
    result = cli("list", "vanilla")
    assert result.code == 0 and "catalogue is out of date" in result.err and "make catalog" in result.err


#: Commands that answer without torch, each as a subprocess: (argv, its exit code).
LIGHT = [(["--help"], 0), (["--version"], 0), (["list"], 0), (["list", "s3*"], 0), (["list", "nosuch"], 2),
         (["env", "--device", "cpu"], 0), (["run"], 2), (["run", "suites/speed.yaml", "--bogus"], 2),
         (["compare", "a"], 2), (["show", "/nonexistent"], 2), (["nosuch"], 2),
         # a --set typo: refused before torch, as a bad flag is (it took the seconds of importing torch)
         (["run", "suites/speed.yaml", "--set", "seqlen=64"], 2),
         (["run", "suites/accuracy.yaml", "--set", "horizon=1"], 2)]


@pytest.mark.parametrize(("argv", "code"), LIGHT, ids=[" ".join(a) for a, _ in LIGHT])
def test_light_commands_answer_without_torch_within_a_second(argv: list[str], code: int) -> None:
    """Each as a fresh process: its exit code, torch never imported, and well under a second of its own (a generous
    bound of 2.5 s for a shared machine; importing torch alone takes 3-10 s here)."""
    if argv[0] == "env" and torch.version.cuda is not None:
        pytest.skip("a CUDA build of torch: env asks torch for cuDNN's version")
    script = ("import sys, time\nt = time.perf_counter()\nimport harness.cli as cli\ntry:\n"
              f"    code = cli.main({argv!r})\nexcept SystemExit as e:\n    code = e.code\n"
              "print('RESULT', code, 'torch' in sys.modules, time.perf_counter() - t, file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120,
                          env={**os.environ, "ATTNBENCH_NO_REEXEC": "1"})
    result = next(line for line in proc.stderr.splitlines() if line.startswith("RESULT")).split()
    assert (int(result[1]), result[2]) == (code, "False"), proc.stderr
    assert float(result[3]) < 2.5, proc.stderr


def test_show_describes_a_results_directory(cli: Callable[..., CliResult], tiny_suite: Path, tmp_path: Path) -> None:
    """Two runs of a tiny suite's store: their ids and commands, the cells by status (latest result of each), the
    noisy count and the files beside the store."""
    cells = load_suite(tiny_suite).expand("cpu")
    directory = tmp_path / "out" / "tiny" / "quick"
    with Store(directory / "results.db") as store:
        first = store.start_run("tiny", "smoke", {}, ["attnbench", "run", "tiny.yaml"])
        for i, cell in enumerate(cells):
            store.put(first, cell, "ok" if i % 4 else "oom", "", {"time_ms_median": 1.0, "noisy": i == 1})
        store.finish_run(first, {})
        again = store.start_run("tiny", "smoke", {}, ["attnbench", "run", "tiny.yaml", "--fresh"])
        store.put(again, cells[0], "ok", "", {"time_ms_median": 1.0, "noisy": False})  # its latest result: ok
    (directory / "table4_x.md").write_text("x")
    result = cli("show", tmp_path / "out")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].endswith("suite tiny, 2 runs") and lines[1].startswith("  run 1  smoke ") and "--fresh" in lines[2]
    assert "did not finish" in lines[2]
    oom = (len(cells) + 3) // 4 - 1
    assert f"  cells: {len(cells)} ({len(cells) - oom} ok, {oom} oom)" in lines
    assert f"  noisy: 1 of {len(cells) - oom} timed ok cells flagged † (timed on a busy machine)" in lines
    assert lines[-2:] == ["  files: 1", "    tables: table4_x.md"]


def test_show_lists_every_file_by_kind(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    """A run ends saying `attnbench show DIR` lists its files: beyond 12 files it printed counts by extension."""
    directory = tmp_path / "speed" / "quick"
    Store(directory / "results.db").close()
    names = ["results.csv", "env.json", "claims.md", "slopes.csv", "slopes.md", "roofline_g.md", "roofline_g.tex",
             "roofline_g.png", "roofline_g.pdf", *(f"table4_g{i}.{e}" for i in range(8) for e in ("md", "tex")),
             *(f"time_g{i}.{e}" for i in range(8) for e in ("png", "pdf"))]
    for name in names:
        (directory / name).write_text("x")
    result = cli("show", directory)
    assert result.code == 0, result.err
    text = result.out[result.out.index("  files: "):]
    assert text.startswith(f"  files: {len(names)}\n    data: env.json, results.csv\n    tables: ")
    assert "roofline_g.{md,tex}, slopes.{csv,md}, table4_g0.{md,tex}" in " ".join(text.split())
    assert "figures: roofline_g.{pdf,png}, time_g0.{pdf,png}" in " ".join(text.split())
    assert text.rstrip().endswith("claims: claims.md")
    assert all(f"time_g{i}.{{pdf,png}}" in text for i in range(8)) and max(map(len, text.splitlines())) <= 120


def test_env_prints_json(cli: Callable[..., CliResult]) -> None:
    result = cli("env", "--device", "cpu")
    assert result.code == 0
    env = json.loads(result.out)
    assert env["torch_version"] == torch.__version__
    assert env["device"].startswith("cpu")


# ---------------------------------------------------------------------------------------------------
# report


@pytest.fixture
def results_dir(tmp_path: Path, tiny_suite: Path) -> Path:
    """A results directory as `attnbench run` leaves it, with synthetic measurements (no measuring here)."""
    suite = load_suite(tiny_suite)
    directory = tmp_path / "results" / suite.name / suite.profile
    with Store(directory / "results.db") as store:
        run = store.start_run(suite.name, suite.profile, {"device": "cpu", "torch_version": "x"}, [])
        for i, cell in enumerate(suite.expand("cpu")):
            n = cell.params["seq_len"]
            if cell.params["attention"] == "vanilla" and n == 32 and cell.params["mode"] == "fwd":
                store.put(run, cell, "oom", "OutOfMemoryError: CUDA out of memory")
                continue
            metrics = {"backend": "math", "time_ms_median": n / 3 + i, "time_ms_iqr": 0.1,
                       "peak_mem_bytes": 1000 * n, "gflops": 1e-3 * n, "gflops_per_s": 1.0 / 3,
                       "steps_per_s": 3.0 / n}
            store.put(run, cell, "ok", "", metrics)
    return directory


def test_report_regenerates_the_tables(cli: Callable[..., CliResult], results_dir: Path) -> None:
    result = cli("report", results_dir)
    assert result.code == 0, result.err
    tables = sorted(p.name for p in results_dir.glob("table4_*.md"))
    assert len(tables) == 2  # fwd and fwd+bwd
    for path in [*results_dir.glob("*.md"), *results_dir.glob("*.tex"), results_dir / "results.csv"]:
        path.unlink()
    assert not list(results_dir.glob("*.md"))

    result = cli("report", results_dir)
    assert result.code == 0, result.err
    assert "wrote" in result.out and str(results_dir) in result.out
    assert sorted(p.name for p in results_dir.glob("table4_*.md")) == tables
    assert len(list(results_dir.glob("table4_*.tex"))) == 2
    assert (results_dir / "slopes.md").is_file()
    assert list(results_dir.glob("*.png")) and list(results_dir.glob("*.pdf"))
    fwd = next(results_dir.glob("table4_*_fwd_*.md")).read_text()
    assert "OOM" in fwd and "Transformer" in fwd and "S3Attention" in fwd  # display names, as a paper prints them

    # the CSV is the store at full precision
    csv = pd.read_csv(results_dir / "results.csv")
    with Store(results_dir / "results.db") as store:
        df = store.dataframe()
    assert len(csv) == len(df) == 8
    merged = csv.merge(df, on="key", suffixes=("_csv", "_db"))
    ok = merged["status_db"] == "ok"
    assert (merged.loc[ok, "time_ms_median_csv"] == merged.loc[ok, "time_ms_median_db"]).all()
    assert (merged.loc[ok, "gflops_per_s_csv"] == 1.0 / 3).all()


def test_report_finds_stores_below_a_parent(cli: Callable[..., CliResult], results_dir: Path) -> None:
    root = results_dir.parent.parent
    result = cli("report", root)
    assert result.code == 0
    assert str(results_dir) in result.out
    assert (results_dir / "results.csv").is_file()


@pytest.mark.parametrize("which", ["empty", "missing"])
def test_report_without_a_store_exits_2(cli: Callable[..., CliResult], tmp_path: Path, which: str) -> None:
    directory = tmp_path / "empty"
    if which == "empty":
        directory.mkdir()
    _one_error_line(cli("report", directory), str(directory), "results.db")


# ---------------------------------------------------------------------------------------------------
# Bad flags: exit 2 and one line naming the flag, before anything is written.


@NO_CUDA
def test_device_cuda_without_cuda(cli: Callable[..., CliResult], tiny_suite: Path, tmp_path: Path) -> None:
    _one_error_line(cli("run", tiny_suite, "--out", tmp_path / "o", "--device", "cuda"), "--device", "cuda")
    _one_error_line(cli("run", tiny_suite, "--out", tmp_path / "o", "--device", "cuda:3"), "--device")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("flags", "needles"),
    [
        pytest.param(["--device", "tpu"], ["--device", "tpu"], id="device-tpu"),
        pytest.param(["--device", "meta"], ["--device", "meta"], id="device-meta"),
        pytest.param(["--device", "cuda:x"], ["--device", "cuda:x"], id="device-bad-index"),
        pytest.param(["--set", "nosuch=1"], ["--set", "nosuch"], id="set-unknown-axis"),
        pytest.param(["--set", "seq_len"], ["--set", "seq_len"], id="set-no-equals"),
        pytest.param(["--set", "seq_len=0"], ["--set", "seq_len"], id="set-bad-value"),
        pytest.param(["--set", "attention=nosuch*"], ["--set", "attention", "nosuch*"], id="set-bad-pattern"),
        pytest.param(["--only", "nomatch*"], ["--only", "nomatch*"], id="only-no-match"),
        pytest.param(["--only", "vanilla,nosuch"], ["--only", "nosuch"], id="only-list"),
        pytest.param(["--timeout", "-1"], ["--timeout"], id="timeout-negative"),
        pytest.param(["--timeout", "0"], ["--timeout"], id="timeout-zero"),
        pytest.param(["--timeout", "soon"], ["--timeout"], id="timeout-not-a-number"),
        pytest.param(["--profile", "nosuch"], ["profiles", "nosuch"], id="profile"),
        pytest.param(["--frobnicate"], ["--frobnicate"], id="unknown-flag"),
    ],
)
def test_bad_run_flags(cli: Callable[..., CliResult], tiny_suite: Path, tmp_path: Path, flags: list[str],
                       needles: list[str]) -> None:
    args = ["run", tiny_suite, "--out", tmp_path / "o"]
    if "--device" not in flags:
        args += ["--device", "cpu"]
    _one_error_line(cli(*args, *flags), *needles)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "flags",
    [
        pytest.param(["--timeout", "nan"], id="timeout-nan"),
        pytest.param(["--timeout", "inf"], id="timeout-inf"),
        pytest.param(["--set", "mode=[fwd"], id="set-yaml-error"),
    ],
)
def test_non_finite_timeout_and_unparsable_set_are_refused(
    cli: Callable[..., CliResult], tiny_suite: Path, tmp_path: Path, flags: list[str]
) -> None:
    result = cli("run", tiny_suite, "--out", tmp_path / "o", "--device", "cpu", "--only", "nosuch*", *flags)
    _one_error_line(result, flags[0])
    assert "--only" not in result.err  # the flag itself is refused, before --only is looked at


def test_set_on_a_suite_without_axes(cli: Callable[..., CliResult], write_yaml: Callable[..., Path],
                                     tmp_path: Path) -> None:
    path = write_yaml("name: t\nprofiles: {smoke: {}, quick: {}, paper: {}}\n")
    result = cli("run", path, "--out", tmp_path / "o", "--device", "cpu", "--set", "seq_len=16")
    _one_error_line(result, "axes")


def test_out_under_a_regular_file(cli: Callable[..., CliResult], tiny_suite: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "file.txt"
    blocker.write_text("not a directory")
    _one_error_line(cli("run", tiny_suite, "--out", blocker / "results", "--device", "cpu"), "--out")
    _one_error_line(cli("run", tiny_suite, "--out", blocker, "--device", "cpu"), "--out")
    assert blocker.read_text() == "not a directory"


@pytest.mark.parametrize("argv", [["frobnicate"], [], ["run"], ["report"]],
                         ids=["unknown", "none", "run", "report"])
def test_usage_errors(cli: Callable[..., CliResult], argv: list[str]) -> None:
    line = _one_error_line(cli(*argv))
    assert "--help" in line
    if argv == ["frobnicate"]:
        assert "frobnicate" in line


def test_run_where_no_cell_is_ok_still_writes_reports(
    cli: Callable[..., CliResult], write_yaml: Callable[..., Path], tmp_path: Path
) -> None:
    path = write_yaml(tiny_doc(skip=[{"when": {"seq_len": {"ge": 1}}, "reason": "everything"}]))
    result = cli("run", path, "--out", tmp_path / "o", "--device", "cpu")
    assert result.code == 1  # nothing was measured: a script that runs this must not take it for a success
    assert "unsupported=8" in result.out and result.err_lines[-1:] == [
        f"attnbench: error: no cell of this run finished ok (unsupported); see the message column of "
        f"{tmp_path / 'o' / 'tiny' / 'quick' / 'results.csv'}"]
    out = tmp_path / "o" / "tiny" / "quick"
    # the cells are in results.csv; a cell a skip rule left out is in no table, so there is none
    assert len(pd.read_csv(out / "results.csv")) == 8 and not list(out.glob("table4_*.md"))
    again = cli("run", path, "--out", tmp_path / "o", "--device", "cpu")
    assert again.code == 0 and "ran: nothing to run" in again.out  # nothing left to run is not a failure


@pytest.mark.parametrize(("argv", "line"), [
    (["run"], "attnbench: error: run: the following arguments are required: suite (see attnbench run --help)"),
    (["frobnicate"], "attnbench: error: argument command: invalid choice: 'frobnicate' (choose from 'list', 'run', "
                     "'report', 'compare', 'show', 'env') (see attnbench --help)"),
])
def test_usage_errors_have_one_prefix(cli: Callable[..., CliResult], argv: list[str], line: str) -> None:
    assert cli(*argv).err_lines == [line]


@pytest.mark.parametrize(("pattern", "hint"), [("vanila", "did you mean vanilla, vanilla_sdpa? "), ("nosuch*", "")])
def test_list_of_a_pattern_that_matches_nothing_is_exit_2(cli: Callable[..., CliResult], pattern: str,
                                                          hint: str) -> None:
    result = cli("list", pattern)
    assert result.code == 2 and result.out == "" and result.err_lines == [
        f"attnbench: error: list {pattern!r}: matches no registered attention; {hint}`attnbench list` shows all"]


def test_version_answers_without_torch() -> None:
    code = ("import sys\nimport harness.cli as cli\ntry:\n    cli.main(['--version'])\nexcept SystemExit as e:\n"
            "    print(e.code)\nprint('torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    from importlib.metadata import version

    assert proc.stdout.splitlines() == [f"attnbench {version('attnbench')}", "0", "False"], proc.stderr


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["report", "--help"]])
def test_help_does_not_import_torch(argv: list[str]) -> None:
    # A fresh interpreter: --help must answer without importing torch (seconds on a busy machine), and `run` must be
    # able to re-execute itself with the timing malloc settings before torch is first imported.
    code = (f"import sys\nimport harness.cli as cli\ntry:\n    cli.main({argv!r})\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "False"


def test_a_run_writes_nothing_outside_out(tiny_suite: Path, tmp_path: Path) -> None:
    # The libraries' caches (matplotlib's fonts, Inductor's, Triton's and CUDA's kernels) default to $HOME and $TMPDIR;
    # a run points them under --out. On a CUDA machine the GPU ones are written even by this --device cpu run.
    dropped = {*CACHE_DIRS, "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "RAY_TMPDIR"}
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    system_tmp = tmp_path / "system-tmp"  # the system's temporary folder, as the run's environment has it
    system_tmp.mkdir()
    env.update(HOME=str(tmp_path / "home"), PYTHONPATH=str(REPO_ROOT), OMP_NUM_THREADS="1", TMPDIR=str(system_tmp))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "run", str(tiny_suite), "--profile", "smoke",
                           "--out", str(out), "--device", "cpu", "--only", "vanilla"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not (tmp_path / "home").exists() or not any((tmp_path / "home").rglob("*"))
    assert (out / ".cache" / "matplotlib").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["out", "system-tmp", "tiny.yaml"])
    assert not any(system_tmp.iterdir()), sorted(system_tmp.iterdir())
    assert (out / ".cache" / "tmp").is_dir()


def test_a_runs_temporary_files_go_under_out(tmp_path: Path) -> None:
    """TMPDIR of the run and its workers is <out>/.cache/tmp once the run begins; Ray's session folder follows where
    its socket paths fit, else stays in the system's temporary folder."""
    code = ("import os, sys, tempfile\nimport harness.cli as cli\nfrom harness.run import runner\n"
            "system = tempfile.gettempdir()\ncli._caches_under_out(sys.argv[1])\nrunner._temporary_folder()\n"
            "print(tempfile.gettempdir())\nprint(os.environ['RAY_TMPDIR'])\nprint(system)")
    env = {k: v for k, v in os.environ.items() if k not in ("TMPDIR", "RAY_TMPDIR")}
    for out, ray_here in ((tmp_path / "o", len(str(tmp_path / "o")) < 25), (tmp_path / ("deep" * 20), False)):
        proc = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, cwd=REPO_ROOT,
                              env=env, timeout=120)
        temp, ray, system = proc.stdout.split()
        assert Path(temp) == out / ".cache" / "tmp" and Path(temp).is_dir(), proc.stderr
        assert (Path(ray) == out / ".cache" / "ray") is ray_here and (ray_here or ray == system)


# ---------------------------------------------------------------------------------------------------
# Hostile input that reaches the terminal, odd paths, the fault hook

#: Clears the screen, retitles the window and prints a forged line in red, if printed raw.
ESCAPES = "\x1b[2J\x1b]0;owned\x07\x1b[31mFAKE: all cells ok"


def test_an_error_quoting_terminal_escapes_prints_them_escaped(cli: Callable[..., CliResult],
                                                               write_yaml: Callable[..., Path], tmp_path: Path) -> None:
    result = cli("run", write_yaml(tiny_doc(axes={ESCAPES: [1]})), "--out", tmp_path / "o", "--device", "cpu")
    line = _one_error_line(result, r"axes.\x1b[2J\x1b]0;owned\x07\x1b[31mFAKE: all cells ok", "unknown axis")
    assert "\x1b" not in result.err and "\x07" not in result.err and line.isprintable()


def test_a_warning_quoting_terminal_escapes_prints_them_escaped(cli: Callable[..., CliResult],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import warnings

    from harness import light

    def warn(args: object) -> int:
        warnings.warn(f"a file named {ESCAPES}", UserWarning, stacklevel=1)
        return 0

    monkeypatch.setitem(light.COMMANDS, "cmd_list", warn)
    result = cli("list")
    assert result.code == 0 and r"a file named \x1b[2J\x1b]0;owned" in result.err and "\x1b" not in result.err


def test_show_and_report_take_the_store_file_itself(cli: Callable[..., CliResult], results_dir: Path) -> None:
    by_file = cli("show", results_dir / "results.db")
    assert by_file.code == 0, by_file.err
    assert by_file.out == cli("show", results_dir).out
    report = cli("report", results_dir / "results.db")
    assert report.code == 0 and (results_dir / "results.csv").is_file(), report.err
    _one_error_line(cli("show", results_dir / "nosuch.db"), "no such file or directory")


def test_show_prints_a_stored_command_line_escaped(cli: Callable[..., CliResult], tmp_path: Path) -> None:
    with Store(tmp_path / "s" / "results.db") as store:
        store.finish_run(store.start_run("tiny", "smoke", {}, ["attnbench", "run", f"{ESCAPES}.yaml"]), {})
    result = cli("show", tmp_path / "s")
    assert result.code == 0 and r"\x1b[2J\x1b]0;owned\x07" in result.out and "\x1b" not in result.out


@pytest.mark.parametrize("spec", ["runner.before_cell:x", "runner.before_cell:0", "runner.before_cell:1:kil",
                                  ":1:kill"])
def test_a_malformed_fault_hook_is_one_line_before_anything_runs(cli: Callable[..., CliResult], tiny_suite: Path,
                                                                  tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  spec: str) -> None:
    monkeypatch.setenv("ATTNBENCH_FAULT", spec)
    result = cli("run", tiny_suite, "--out", tmp_path / "o", "--device", "cpu", "--profile", "smoke")
    _one_error_line(result, f"ATTNBENCH_FAULT={spec!r}", "a test hook", "unset it")
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(not Path("/proc/self").is_dir() or not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="root on Linux: os.access says /proc is writable")
def test_rank_into_proc_is_bad_input_not_a_full_disk(cli: Callable[..., CliResult], results_dir: Path) -> None:
    result = cli("report", "--rank", results_dir, "--out-dir", "/proc/attnbench-nowhere")
    _one_error_line(result, "--out-dir /proc/attnbench-nowhere", "cannot be created or written",
                    "choose another output directory")
