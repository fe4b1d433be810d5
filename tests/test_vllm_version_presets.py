"""Every validation point whose engine names a vLLM release runs on that release's preset.

The scheduling of vLLM changed twice in ways the presets model: 0.8 made the V1 engine core the
default (``vllm-v0`` before it: 0.5-0.7), and 0.14.0 turned async scheduling on by default
(vllm-project/vllm PR #27614; ``vllm-v1`` is 0.8-0.13, ``vllm-v1-async`` 0.14 and later, as the
presets' ``versions`` entries say). A row whose engine names a release but runs on another preset
must say why in its notes (``preset NAME: reason``), e.g. a run that passed
``--no-async-scheduling``. Engines that name no release ("version not stated", a 2024 blog's "V0
engine") and development builds (``0.1.devN``, setuptools-scm's version of an untagged checkout,
which names no release) are outside the rule. The expert kernel a release runs follows its
version too: vLLM 0.18.0 runs MXFP4 experts on Hopper through triton_kernels' matmul_ogs.
"""

from __future__ import annotations

import re

import pytest

from sim.catalogue import get_gpu, get_model
from sim.engine.presets import get_preset
from sim.moe import engine_moe_kernel
from sim.validation.points import ValidationPoint, load_points
from sim.validation.scenarios import scenario_document

#: The first release of each preset, newest first (engine_presets.yaml ``versions``).
FIRST_RELEASE = (((0, 14), "vllm-v1-async"), ((0, 8), "vllm-v1"), ((0, 5), "vllm-v0"))
#: ``0.18.0``, ``v0.10.1``, ``0.7 era``; not ``0.1.dev13107`` (no release).
RELEASE = re.compile(r"\bv?(\d+)\.(\d+)(?:\.(\d+))?(?![.\d]*dev)")


def vllm_release(engine: str) -> tuple[int, int] | None:
    """The (major, minor) release an engine column names, or None where it names none."""
    if "vllm" not in engine.lower():
        return None
    match = RELEASE.search(engine)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2))


def preset_of_release(release: tuple[int, int]) -> str | None:
    """The preset that models ``release``, or None before 0.5 (no preset)."""
    for first, preset in FIRST_RELEASE:
        if release >= first:
            return preset
    return None


def stated_exception(point: ValidationPoint) -> bool:
    """Whether the row's notes give the reason it runs on another preset."""
    marker = f"preset {point.preset}:"
    at = point.notes.find(marker)
    return at >= 0 and len(point.notes[at + len(marker) :].strip()) >= 20


@pytest.mark.parametrize(
    ("engine", "release"),
    [
        ("vllm 0.18.0", (0, 18)),
        ("vLLM 0.15.1", (0, 15)),
        ("vLLM v0.10.1", (0, 10)),
        ("vllm 0.12.0", (0, 12)),
        ("vLLM V0 engine (early 2025, 0.7 era)", (0, 7)),
        ("vLLM main 2026-01 (0.1.dev13107+ge1a34c3a5)", None),
        ("vllm (version not stated)", None),
        ("vLLM (2024-10, V0 engine)", None),
        ("sglang 0.5.6", None),
    ],
)
def test_the_release_is_read_from_the_engine_column(
    engine: str, release: tuple[int, int] | None
) -> None:
    assert vllm_release(engine) == release


def test_release_boundaries_follow_the_presets_version_ranges() -> None:
    # 0.13 is the last synchronous release, 0.14.0 the first with async scheduling by default.
    assert preset_of_release((0, 13)) == "vllm-v1"
    assert preset_of_release((0, 14)) == "vllm-v1-async"
    assert preset_of_release((0, 7)) == "vllm-v0"
    assert preset_of_release((0, 8)) == "vllm-v1"
    assert preset_of_release((0, 4)) is None
    assert get_preset("vllm-v1-async").versions.startswith("vLLM 0.14 and later")
    assert "0.8-0.13" in get_preset("vllm-v1").versions
    assert get_preset("vllm-v1-async").async_scheduling
    assert not get_preset("vllm-v1").async_scheduling


def test_every_point_naming_a_vllm_release_runs_on_its_preset() -> None:
    checked = 0
    wrong = []
    for point in load_points():
        release = vllm_release(point.engine)
        if release is None:
            continue
        checked += 1
        expected = preset_of_release(release)
        if point.preset != expected and not stated_exception(point):
            wrong.append(f"{point.point_id}: {point.engine} on {point.preset}, not {expected}")
    assert not wrong, "\n".join(wrong[:10]) + f"\n({len(wrong)} rows)"
    # The 0.12.0, 0.15.1, 0.18.0, 0.10.1 and 0.7-era rows are all covered.
    assert checked >= 300


def test_an_exception_needs_its_reason_in_the_notes() -> None:
    point = next(p for p in load_points() if vllm_release(p.engine) == (0, 18))
    sync = ValidationPoint(**{**point.__dict__, "preset": "vllm-v1"})
    assert not stated_exception(sync)
    reasoned = ValidationPoint(
        **{
            **sync.__dict__,
            "notes": "preset vllm-v1: the run passed --no-async-scheduling (its command line)",
        }
    )
    assert stated_exception(reasoned)
    assert not stated_exception(
        ValidationPoint(**{**sync.__dict__, "notes": "preset vllm-v1: sync"})
    )


def test_vllm_0_18_runs_matmul_ogs_for_mxfp4_experts_on_hopper_without_ep() -> None:
    # vLLM 0.18.0's get_mxfp4_backend on SM90 takes its vendored triton_kernels (matmul_ogs)
    # unless FlashInfer's MXFP4 x BF16 or Marlin is asked for by environment variable; the
    # releases not read from their wheel keep the fused_moe pricing (moe_kernels.yaml).
    h100, h200, b200 = get_gpu("h100-sxm"), get_gpu("h200"), get_gpu("b200")
    mx = get_model("gpt-oss-120b").with_precision("mxfp4", "bf16")
    assert engine_moe_kernel("vllm 0.18.0", h100, mx, 4) == "matmul_ogs"
    assert engine_moe_kernel("vllm 0.18.0", h200, mx, 1) == "matmul_ogs"
    assert engine_moe_kernel("vllm 0.18.0", h200, mx, 1, expert_parallel=2) == "triton"
    assert engine_moe_kernel("vllm 0.18.0", b200, mx, 1) == "triton"
    assert engine_moe_kernel("vllm 0.15.1", h100, mx, 1) == "triton"
    assert engine_moe_kernel("vllm (version not stated)", h100, mx, 1) == "triton"
    assert engine_moe_kernel("sglang 0.18.0", h100, mx, 1) == "triton"
    assert engine_moe_kernel("vllm 0.18.0", h100, get_model("gpt-oss-120b"), 1) == "triton"


def test_the_gpt_oss_0_18_rows_build_with_matmul_ogs_on_the_async_preset() -> None:
    rows = [p for p in load_points() if p.engine == "vllm 0.18.0" and p.model == "gpt-oss-120b"]
    assert len(rows) >= 90
    for point in rows:
        engine = scenario_document(point)["engine"]
        assert engine["preset"] == "vllm-v1-async", point.point_id
        assert engine["moe_kernel"] == "matmul_ogs", point.point_id
        assert "async_scheduling None -> True" in point.notes, point.point_id
