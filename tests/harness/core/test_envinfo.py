"""Tests of harness.core.envinfo."""

from __future__ import annotations

import datetime
import json

import pytest
import torch

from harness.core import envinfo
from harness.core.envinfo import collect_env

KEYS = set(
    "device device_name cpu_model cpu_capability cpu_bf16 torch_version cuda_version cudnn_version python_version"
    " threads"
    " interop_threads cpu_count platform hostname git_commit time_utc glibc_tunables xformers_version"
    " numpy_version".split()
)


def test_keys_and_json() -> None:
    env = collect_env(torch.device("cpu"))
    assert KEYS <= env.keys()
    json.loads(json.dumps(env))
    assert env["device"] == "cpu"
    assert env["threads"] == torch.get_num_threads()
    assert env["torch_version"] == torch.__version__
    assert datetime.datetime.fromisoformat(env["time_utc"]).utcoffset() == datetime.timedelta(0)


def test_glibc_tunables_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.top_pad=0")
    assert collect_env(torch.device("cpu"))["glibc_tunables"] == "glibc.malloc.top_pad=0"
    monkeypatch.delenv("GLIBC_TUNABLES")
    assert collect_env(torch.device("cpu"))["glibc_tunables"] is None


def test_git_commit_format() -> None:
    commit = collect_env(torch.device("cpu"))["git_commit"]
    if commit is not None:  # None outside a git checkout
        sha = commit.removesuffix("-dirty")
        assert len(sha) == 40 and all(c in "0123456789abcdef" for c in sha)


def test_missing_git_gives_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")
    assert collect_env(torch.device("cpu"))["git_commit"] is None


def test_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> int:
        raise RuntimeError("boom")

    monkeypatch.setattr(torch, "get_num_threads", broken)
    monkeypatch.setattr(envinfo, "_cpu_model", broken)
    env = collect_env(torch.device("cpu"))
    assert env["threads"] is None and env["cpu_model"] is None
    json.dumps(env)


def test_the_cpu_block_without_torch_matches_collect_env() -> None:
    """Every key, and every value that does not depend on the moment or on torch's thread pools, equal."""
    full = collect_env(torch.device("cpu"))
    light = envinfo.collect_cpu_env(threads=3)
    assert list(light) == list(full)
    for key in ("device", "device_name", "cpu_model", "cpu_bf16", "torch_version", "cuda_version", "python_version",
                "cpu_count", "platform", "hostname", "git_commit", "glibc_tunables", "numpy_version"):
        assert light[key] == full[key], key
    assert light["threads"] == 3 and light["interop_threads"] is None
    if full["cuda_version"] is None:
        assert light["cudnn_version"] == full["cudnn_version"]


#: /proc/cpuinfo of a virtual machine whose model name is only the brand, on an AVX2 CPU (no bfloat16 instructions).
AVX2_VM = {"vendor_id": "AuthenticAMD", "cpu family": "23", "model": "49", "model name": "AMD EPYC", "stepping": "0",
           "flags": "fpu sse2 avx avx2 fma hypervisor"}


def test_the_cpu_is_named_as_a_hardware_line_needs_and_its_isa_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    """"AMD EPYC" was all a paper's hardware line got: the family, model and stepping tell the generation, and the
    instruction set torch dispatches for tells whether bfloat16 is emulated."""
    monkeypatch.setattr(envinfo, "_cpuinfo", lambda: dict(AVX2_VM))
    env = collect_env(torch.device("cpu"))
    assert env["cpu_model"] == env["device_name"] == "AMD EPYC (family 23, model 49, stepping 0, virtual machine)"
    assert env["cpu_capability"] == torch.backends.cpu.get_cpu_capability() and env["cpu_bf16"] == "emulated"
    monkeypatch.setattr(envinfo, "_cpuinfo", lambda: {**AVX2_VM, "flags": "avx2 avx512f avx512_bf16"})
    assert envinfo.cpu_bf16() == "native"
    monkeypatch.setattr(envinfo, "_cpuinfo", dict)
    assert envinfo.cpu_bf16() is None
