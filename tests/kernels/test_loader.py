"""The kernel-file loader: what it accepts, what it refuses and how it says so."""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim import kernels, moe_kernel
from sim.errors import CatalogueError

WHERE = "sim/data/kernels/test.yaml"


def shipped_text(gpu: str) -> str:
    return resources.files("sim").joinpath(f"data/kernels/{gpu}.yaml").read_text("utf-8")


def mutated(edit: Callable[[dict[str, Any]], object]) -> str:
    data = yaml.safe_load(shipped_text("h100-sxm"))
    edit(data)
    return yaml.safe_dump(data, sort_keys=False)


def test_every_shipped_file_loads_and_names_its_gpu() -> None:
    names = kernels.kernel_gpu_names()
    assert names == ["h100-sxm", "h200"]
    for gpu in names:
        parsed = kernels.parse_kernel_file(shipped_text(gpu), WHERE)
        assert parsed.gpu == gpu
        assert parsed.source["commit"].startswith("095f58a51c")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["moe"]["bf16"].pop("bandwidth"), r"moe\.bf16\.bandwidth: Field required"),
        (lambda d: d["moe"]["bf16"].update(flops=1.5), r"moe\.bf16\.flops: .*less than or equal"),
        (lambda d: d["gemm"]["fp8"].update(colour="red"), r"gemm\.fp8\.colour: Extra inputs"),
        (lambda d: d["moe"].update(int8=d["moe"]["bf16"]), r"moe\.int8"),
        (
            lambda d: d["decode_attention"]["bf16"]["ci95"].update(bandwidth=[0.1, 0.2]),
            r"decode_attention\.bf16: .*ci95\.bandwidth .* must contain the estimate",
        ),
        (
            lambda d: d["allreduce"]["graph"]["tp"][2]["latency_s"].reverse(),
            r"allreduce\.graph\.tp\.2: .*non-decreasing",
        ),
        (
            lambda d: d["allreduce"]["nccl"]["tp"][4]["message_bytes"].pop(),
            r"allreduce\.nccl\.tp\.4: .*same length",
        ),
        (lambda d: d["allreduce"].update(ring={}), r"allreduce\.ring"),
    ],
)
def test_malformed_files_are_refused_naming_file_and_key_path(
    edit: Callable[[dict[str, Any]], object], message: str
) -> None:
    with pytest.raises(CatalogueError, match=rf"^{WHERE}: .*{message}"):
        kernels.parse_kernel_file(mutated(edit), WHERE)


@pytest.mark.parametrize("text", ["gpu: [unclosed", "- a list", ""])
def test_non_mapping_or_invalid_yaml_is_refused(text: str) -> None:
    with pytest.raises(CatalogueError, match=rf"^{WHERE}: (not valid YAML|expected a mapping)"):
        kernels.parse_kernel_file(text, WHERE)


def test_unmeasured_kernels_say_so_instead_of_borrowing_another_gpu() -> None:
    assert kernels.has_collectives("h200") and kernels.has_collectives("h100-sxm")
    assert not kernels.has_collectives("a100-80gb")
    assert moe_kernel.moe_efficiency("h200", "bf16").floor_s > 0
    assert kernels.gemm_efficiency("h200", "fp8").bandwidth > 0
    # The H200's attention rows were collected but contradict the GPU (tools/kernel_sources.py
    # SET_ASIDE): the loader gives that reason instead of another GPU's fit.
    for call in (
        lambda: kernels.decode_attention("h200", "bf16"),
        lambda: kernels.prefill_attention("h200"),
    ):
        with pytest.raises(CatalogueError, match=r"'h200'.*have: none\); collected but set aside"):
            call()
    with pytest.raises(CatalogueError, match=r"'h100-sxm'.*have: fp8, fp8_block\)"):
        kernels.gemm_efficiency("h100-sxm", "int4")
    with pytest.raises(CatalogueError, match=r"'a100-80gb'.*no kernel file"):
        kernels.allreduce_s("a100-80gb", 2, 1024.0)


@pytest.mark.parametrize("tp", [1, 3, 16])
def test_a_tp_without_a_table_is_an_error_naming_the_measured_degrees(tp: int) -> None:
    with pytest.raises(CatalogueError, match=rf"TP {tp} .*measured TP degrees: 2, 4, 8"):
        kernels.allreduce_s("h100-sxm", tp, 1024.0, "graph")


def test_unknown_dtype_names_what_exists() -> None:
    with pytest.raises(CatalogueError, match=r"moe 'int4'.*have: bf16, fp8, fp8_block"):
        moe_kernel.moe_efficiency("h100-sxm", "int4")


def test_the_fit_tool_refuses_a_folder_without_the_collection(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tools.fit_kernels import main

    assert main(["--shared", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "no kernel collection here (--shared PATH)" in err
    assert "Traceback" not in err
