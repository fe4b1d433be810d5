"""Time ``specsim calibrate`` on aggregate-only benchmark results and check the profile's TPOT.

Single file: the real ``benchmark_serving.py --save-result`` run of vLLM's nightly benchmark
(Llama-3.3-70B-Instruct, TP8, ShareGPT, 4 req/s, 200 prompts; ``llm-k8s__tp8_pp1_sharegpt_qps_04``)
with its per-request arrays (``input_lens``, ``output_lens``, ``ttfts``, ``itls``,
``generated_texts``, ``errors``) removed, which is what ``vllm bench serve`` writes without
``--save-detailed`` from 0.9.2 on. It ran on 8×A100-40GB (Azure ND96asr_v4); the catalogue's
nearest GPU, ``a100-80gb``, has a higher peak bandwidth, which the fit must absorb. Sweep: the
same deployment's nightly results table (qps 1, 4, 16, inf), one fit.

For each, the fit's wall time is printed, then the rebuilt run is simulated again with the written
profile (``engine.profile``, so through the scenario exactly as a user would) and its mean TPOT set
beside the file's. Usage (from the repository root, with the shared data beside the checkout)::

    python -m benchmarks.bench_calibrate_aggregate [--shared PATH]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from calibration.aggregate import aggregate_experiment
from calibration.calibrate import calibrate
from calibration.hardware_efficiency import default_shared
from calibration.profile_document import write_profile
from sim.artifacts import parse_runs
from sim.run import run_scenario
from sim.scenario import validate_document

FOLDER = Path("data/vllm-artifacts/vllm_benchmark_serving_json")
DETAILED = FOLDER / "llm-k8s__tp8_pp1_sharegpt_qps_04.json"
SWEEP = FOLDER / "llm-k8s__tp8_pp1_benchmark_results_aggregate.json"
ARRAYS = ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors")
TARGET = {"gpu": "a100-80gb", "model": "llama-3.3-70b", "tp": 8}


def strip_arrays(source: Path, folder: Path) -> Path:
    """Write ``source`` without its per-request arrays into ``folder``."""
    result = json.loads(source.read_text(encoding="utf-8"))
    for key in ARRAYS:
        result.pop(key, None)
    path = folder / source.name.replace(".json", "-aggregate.json")
    path.write_text(json.dumps(result, indent=1), encoding="utf-8")
    return path


def reproduce(path: Path, profile: Path) -> list[tuple[str, float, float]]:
    """(run, measured mean TPOT ms, simulated mean TPOT ms with the profile) per run of ``path``."""
    rows = []
    for n, run in enumerate(parse_runs(path)):
        label = str(run.metadata.settings.get("test_name", path.name))
        experiment = aggregate_experiment(run, label, TARGET["gpu"], TARGET["model"], TARGET["tp"])
        document = dict(experiment.document, name=f"check-{n}")
        document["engine"] = {"preset": "vllm-v1", "profile": str(profile)}
        result = run_scenario(validate_document(document, label), Path.cwd())
        rows.append((label, run.aggregates["mean_tpot_ms"], result.summary.tpot_ms.mean))
    return rows


def bench(paths: list[Path], title: str, folder: Path) -> None:
    """Calibrate ``paths`` as one fit; print the wall time, the parameters and the TPOT check."""
    started = time.perf_counter()
    fitted = calibrate(paths, labels=[p.name for p in paths], **TARGET)  # type: ignore[arg-type]
    wall = time.perf_counter() - started
    engine = fitted.document["engine"]
    profile = folder / f"{title}.yaml"
    write_profile(fitted.document, profile)
    print(f"{title}: fit {wall:.1f} s wall, {engine['num_simulations']} simulations")
    for name, row in engine["parameters"].items():
        interval = f" 95% [{row['ci95'][0]:.6g}, {row['ci95'][1]:.6g}]" if "ci95" in row else ""
        print(f"  {name:24} {row['value']:.6g} {row['status']}{interval}")
    for path in paths:
        for label, measured, simulated in reproduce(path, profile):
            print(
                f"  {label}: mean TPOT measured {measured:.2f} ms, with the profile "
                f"{simulated:.2f} ms ({simulated / measured - 1:+.1%})"
            )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; exit status 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=default_shared())
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        single = strip_arrays(args.shared / DETAILED, folder)
        bench([single], "single-file", folder)
        bench([args.shared / SWEEP], "qps-sweep", folder)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
