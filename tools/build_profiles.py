"""Rebuild the calibrated profiles shipped in ``sim/data/profiles/`` from the shared data.

* ``vllm-0.19-llama-3.1-8b-rtx-pro-6000``: the engine overheads fitted by replaying the real vLLM
  0.19.0 run of Llama-3.1-8B on one RTX PRO 6000 (300 ShareGPT requests at about 10/s,
  casys-kaist/LLMServingSim 5daddb2, MIT), with the predicted-against-measured check in and out of
  sample;
* ``llama-3.1-8b-<dataset>-h100-traces``: EAGLE-3 and n-gram acceptance fitted to the per-request
  traces of "Speculative Decoding: Performance or Illusion?" (Liu et al., arXiv:2601.11580;
  SpecDecode-Bench/simulator 59fc3d7) for ShareGPT, CNN/DailyMail, GSM8K and InstructCoder.

Inputs are recorded relative to the shared data folder and the date is fixed, so a rebuild on the
same data writes the same bytes. Run ``python -m tools.build_profiles [--shared PATH]
[--check]``; ``--check`` compares instead of writing and fails on a difference.
"""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

from calibration.calibrate import calibrate
from calibration.hardware_efficiency import default_shared
from calibration.profile_document import profile_yaml
from sim.calibrated_profiles import PROFILE_DIR

BUILD_DATE = dt.date(2026, 4, 26)
TIMINGS = "data/vllm-artifacts/vllm_request_timings/requests.jsonl"
TRACE_DIR = "data/acceptance-traces/llama-3.1-8b-h100-vllm"
DATASETS = ("sharegpt", "cnn", "gsm8k", "instructcoder")


def build_all(shared: Path) -> dict[str, str]:
    """Profile name → YAML text of every shipped profile.

    Raise CalibrationError if an input is missing or a fit fails.
    """
    texts: dict[str, str] = {}
    name = "vllm-0.19-llama-3.1-8b-rtx-pro-6000"
    engine = calibrate(
        [shared / TIMINGS],
        labels=[TIMINGS],
        gpu="rtx-pro-6000",
        model="llama-3.1-8b",
        tp=1,
        check=True,
        name=name,
        command=f"specsim calibrate {TIMINGS} --gpu rtx-pro-6000 --check",
        created=BUILD_DATE,
    )
    texts[name] = profile_yaml(engine.document)
    for dataset in DATASETS:
        name = f"llama-3.1-8b-{dataset}-h100-traces"
        label = f"{TRACE_DIR}/combined_{dataset}.jsonl"
        result = calibrate(
            [shared / label],
            labels=[label],
            name=name,
            command=f"specsim calibrate {label}",
            created=BUILD_DATE,
        )
        texts[name] = profile_yaml(result.document)
    return texts


def main(argv: list[str] | None = None) -> int:
    """Write (or with ``--check`` compare) the shipped profiles; 1 on a difference."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shared", type=Path, default=default_shared())
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    stale = []
    for name, text in build_all(args.shared).items():
        path = PROFILE_DIR / f"{name}.yaml"
        if args.check:
            if not path.is_file() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            PROFILE_DIR.mkdir(exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.name}")
    for name in stale:
        print(f"stale: {name}")
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
