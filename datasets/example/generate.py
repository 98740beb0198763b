"""Writes graded.csv: a synthetic graded-results table for trying routeval.

The generative model (the same one `routeval simulate` documents):
- each request has a difficulty d ~ Beta(a, b), with (a, b) set per slice;
- a model of skill s answers it acceptably with probability
  1 / (1 + exp(-(s - d) / 0.05)); the small model has s = 0.55, the large 0.92;
- the router's score is d plus Gaussian noise (sigma 0.10), clipped to [0, 1]
  and rounded to 3 decimals, so scores tie as real router outputs do;
- the endpoints report the model versions gpt-4o-mini-2024-07-18 (small)
  and gpt-4o-2024-08-06 (large);
- input tokens ~ lognormal around 1,500 and output tokens around 300; the small
  model costs $0.15/$0.60 and the large $3/$15 per million input/output
  tokens, a router call $0.00002 and a verifier call $0.0002.

Run `python3 datasets/example/generate.py` to regenerate the file; it is
deterministic.
"""

import csv
import math
import pathlib
import random

SLICES = {
    # slice: (Beta a, Beta b, rows)
    "billing": (2.0, 4.0, 900),
    "technical": (2.0, 2.5, 900),
    "sales": (1.6, 4.0, 700),
    "legal": (2.4, 2.6, 700),
}
SMALL_SKILL, LARGE_SKILL = 0.55, 0.92
SMALL_PRICE = (0.15e-6, 0.60e-6)
LARGE_PRICE = (3.0e-6, 15.0e-6)
ROUTER_COST, VERIFIER_COST = 0.00002, 0.0002
SMALL_MODEL, LARGE_MODEL = "gpt-4o-mini-2024-07-18", "gpt-4o-2024-08-06"


def solves(rng, skill, difficulty):
    return rng.random() < 1.0 / (1.0 + math.exp(-(skill - difficulty) / 0.05))


def main():
    rng = random.Random(20261129)
    out = pathlib.Path(__file__).with_name("graded.csv")
    columns = [
        "id", "slice", "score", "small_ok", "large_ok", "cost_small", "cost_large",
        "cost_verifier", "cost_router", "small_ms", "small_ttft_ms", "large_ms",
        "large_ttft_ms", "verifier_ms", "input_tokens", "output_tokens",
        "small_model", "large_model",
    ]
    with out.open("w", newline="") as file:
        writer = csv.writer(file, lineterminator="\n")
        writer.writerow(columns)
        for name, (a, b, rows) in SLICES.items():
            for row in range(rows):
                difficulty = rng.betavariate(a, b)
                score = min(1.0, max(0.0, difficulty + rng.gauss(0.0, 0.10)))
                input_tokens = int(rng.lognormvariate(math.log(1500), 0.4))
                output_tokens = int(rng.lognormvariate(math.log(300), 0.5))
                cost = lambda price: input_tokens * price[0] + output_tokens * price[1]
                small_ttft = rng.lognormvariate(math.log(250), 0.3)
                large_ttft = rng.lognormvariate(math.log(900), 0.3)
                writer.writerow([
                    f"{name}-{row:04d}", name, f"{score:.3f}",
                    str(solves(rng, SMALL_SKILL, difficulty)).lower(),
                    str(solves(rng, LARGE_SKILL, difficulty)).lower(),
                    f"{cost(SMALL_PRICE):.8f}", f"{cost(LARGE_PRICE):.8f}",
                    f"{VERIFIER_COST}", f"{ROUTER_COST}",
                    f"{small_ttft + output_tokens * 8:.1f}", f"{small_ttft:.1f}",
                    f"{large_ttft + output_tokens * 25:.1f}", f"{large_ttft:.1f}",
                    f"{rng.lognormvariate(math.log(400), 0.2):.1f}",
                    input_tokens, output_tokens, SMALL_MODEL, LARGE_MODEL,
                ])


if __name__ == "__main__":
    main()
