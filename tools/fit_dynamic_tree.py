"""Fit the EAGLE-2 dynamic tree's confidence model (κ, ρ) to the EAGLE-2 paper's τ.

Input: the published-measurements table (EAGLE-2 paper, arXiv:2406.16858 v2, Table 1, T = 0) and
the EAGLE-1 chain rates already shipped in ``sim/data/acceptance_profiles.yaml`` (EAGLE-1 paper
n-α, the same models and benchmarks). For every grid point (κ, ρ) the dynamic tree of each row
(top-k 10, 6 levels, the paper's 50 or 60 drafts) is simulated with one seed (common random
numbers across the grid) and compared with the published τ. The fit uses the MT-bench and
HumanEval rows; the GSM8K and Alpaca rows are out of sample and reported apart. The error bar of
each parameter is its range over the grid points whose fit RMS relative error is within
``TOLERANCE`` of the best (the Monte-Carlo noise of one tree table is about 0.3 %).

Writes ``sim/data/dynamic_tree_confidence.yaml``. Usage:
``python -m tools.fit_dynamic_tree --shared ../shared/data [--out sim/data]``.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from sim.acceptance.dynamic_tree import ConfidenceModel, DynamicTree, dynamic_tree_reach

MEASUREMENTS = "published-measurements/published_measurements.csv"
MODELS = {
    "Vicuna-7B-v1.3": "vicuna-7b",
    "Vicuna-13B-v1.3": "vicuna-13b",
    "Llama-2-7B-chat": "llama-2-7b",
    "Llama-2-13B-chat": "llama-2-13b",
}
DATASETS = {"MT-bench": "mt-bench", "HumanEval": "humaneval", "GSM8K": "gsm8k", "Alpaca": "alpaca"}
FIT_DATASETS = ("MT-bench", "HumanEval")
#: The paper's trees (App. A): top-k 10, depth 6; 60 drafts for 7B, 50 for 13B.
TOPK, LEVELS = 10, 6
KAPPAS = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0)
RHOS = tuple(round(0.5 + 0.02 * i, 2) for i in range(16))
TREES = 8000
TOLERANCE = 0.003


def published_rows(shared: Path, profiles: dict[str, Any]) -> list[dict[str, Any]]:
    """The EAGLE-2 T = 0 rows with a shipped EAGLE-1 chain profile for the same pair."""
    rows = []
    with (shared / MEASUREMENTS).open(newline="") as handle:
        for index, row in enumerate(csv.DictReader(handle)):
            if (
                row["source_id"] != "eagle2_paper"
                or row["draft_method"] != "EAGLE-2"
                or row["temperature"] != "0"
                or row["target_model"] not in MODELS
                or row["dataset"] not in DATASETS
            ):
                continue
            key = f"eagle/{MODELS[row['target_model']]}/{DATASETS[row['dataset']]}"
            drafts = 50 if "total draft tokens=50" in row["draft_config"] else 60
            rows.append(
                {
                    "csv_line": index + 2,
                    "model": row["target_model"],
                    "dataset": row["dataset"],
                    "num_drafts": drafts,
                    "published_tau": float(row["acceptance_length_tau"]),
                    "chain_profile": key,
                    "chain_rates": list(profiles[key][0]["conditional_rates"]),
                }
            )
    return rows


def predicted_tau(row: dict[str, Any], kappa: float, rho: float, trees: int = TREES) -> float:
    """τ of the row's tree under (κ, ρ)."""
    tree = DynamicTree(TOPK, LEVELS, row["num_drafts"] + 1)
    reach = dynamic_tree_reach(tree, row["chain_rates"], ConfidenceModel(kappa, rho), trees)
    return 1.0 + float(reach.sum())


def fit(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Grid fit on the fit rows; the document section with the checks."""
    fitting = [r for r in rows if r["dataset"] in FIT_DATASETS]
    checking = [r for r in rows if r["dataset"] not in FIT_DATASETS]
    grid = {}
    for kappa in KAPPAS:
        for rho in RHOS:
            errors = [predicted_tau(r, kappa, rho) / r["published_tau"] - 1.0 for r in fitting]
            grid[(kappa, rho)] = float(np.sqrt(np.mean(np.square(errors))))
    best = min(grid, key=lambda key: grid[key])
    near = [key for key, value in grid.items() if value <= grid[best] + TOLERANCE]
    kappa, rho = best

    def table(chosen: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], float]:
        out, errors = [], []
        for r in chosen:
            tau = predicted_tau(r, kappa, rho, trees=20_000)
            errors.append(tau / r["published_tau"] - 1.0)
            error = round(errors[-1], 4)
            out.append({**r, "predicted_tau": round(tau, 3), "relative_error": error})
        return out, round(float(np.sqrt(np.mean(np.square(errors)))), 4)

    fit_rows, fit_rms = table(fitting)
    check_rows, check_rms = table(checking)
    return {
        "confidence_concentration": kappa,
        "confidence_concentration_range": [min(k for k, _ in near), max(k for k, _ in near)],
        "sibling_share": rho,
        "sibling_share_range": [min(r for _, r in near), max(r for _, r in near)],
        "range_rule": f"grid points whose fit RMS relative error is within {TOLERANCE} of the best",
        "grid": {"kappa": list(KAPPAS), "rho": list(RHOS), "trees_per_point": TREES},
        "fit_rms_relative_error": fit_rms,
        "check_rms_relative_error": check_rms,
        "fit_rows": fit_rows,
        "check_rows": check_rows,
    }


def build(shared: Path, out: Path) -> None:
    """Write the fit into ``out``/dynamic_tree_confidence.yaml."""
    profiles = yaml.safe_load((out / "acceptance_profiles.yaml").read_text())["profiles"]
    document = {
        "schema_version": 1,
        "description": "EAGLE-2 dynamic tree confidence model: c_1 ~ Beta(kappa a_d, kappa "
        "(1 - a_d)) with a_d the chain rate at depth d, siblings c_r = (1 - c_1)(1 - rho) "
        "rho^(r - 2); acceptance = confidence at T = 0 (EAGLE-2 Fig. 6)",
        "citation": "Li et al. 2024, EAGLE-2 (arXiv 2406.16858 v2, EMNLP'24), Table 1 (tau, T = 0) "
        "and App. A (trees); chain rates: EAGLE-1 (arXiv 2401.15077 v3) n-alpha via "
        "acceptance_profiles.yaml",
        "fit_datasets": list(FIT_DATASETS),
        **fit(published_rows(shared, profiles)),
    }
    path = out / "dynamic_tree_confidence.yaml"
    temporary = path.with_suffix(".tmp")
    temporary.write_text(yaml.safe_dump(document, sort_keys=False, width=100))
    temporary.replace(path)
    print(f"wrote {path}")


def main() -> None:
    """Command line: ``--shared`` data folder, ``--out`` data folder."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, required=True)
    parser.add_argument("--out", type=Path, default=Path("sim/data"))
    args = parser.parse_args()
    build(args.shared, args.out)


if __name__ == "__main__":
    main()
