"""The peer of `cargo bench --bench router`: scikit-learn's logistic
regression on the same hashed word unigrams and bigrams (2^20 buckets,
sublinear counts, L2-normalised) plus the subject, cross-fitted on the same
five folds (FNV-1a of the prompt text, as routeval assigns them), scoring
RouteLLM's MMLU prompts two ways: the small tier's failure alone, and the
gain of escalating (P(small fails) - P(large fails)). Writes the scores by
id as CSV for `routeval router join` and `routeval evaluate`, so the metric
is routeval's own.

python3 benches/router_sklearn.py ../shared/data/routellm/mmlu scores.csv
"""

import csv
import pathlib
import sys
import time

import numpy as np
import scipy.sparse as sparse
from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import OneHotEncoder

SMALL = "mistralai/Mixtral-8x7B-Instruct-v0.1"
LARGE = "gpt-4-1106-preview"
FOLDS = 5


def fold_of(prompt):
    value = 0xCBF29CE484222325
    for byte in prompt.encode():
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return value % FOLDS


def main(directory, out):
    ids, subjects, prompts, small_failed, large_failed = [], [], [], [], []
    for path in sorted(pathlib.Path(directory).glob("mmlu_*.csv")):
        subject = path.stem.removeprefix("mmlu_")
        with path.open(newline="") as file:
            for index, row in enumerate(csv.DictReader(file)):
                ids.append(f"{subject}-{index}")
                subjects.append([subject])
                prompts.append(row["prompt"])
                small_failed.append(row[SMALL] != "True")
                large_failed.append(row[LARGE] != "True")
    start = time.perf_counter()
    words = HashingVectorizer(
        ngram_range=(1, 2), n_features=2**20, alternate_sign=False, norm=None
    ).transform(prompts)
    words = TfidfTransformer(use_idf=False, sublinear_tf=True).fit_transform(words)
    features = sparse.hstack([words, OneHotEncoder().fit_transform(subjects)]).tocsr()
    folds = np.array([fold_of(prompt) for prompt in prompts])
    labels = {"small": np.array(small_failed), "large": np.array(large_failed)}
    probability = {tier: np.zeros(len(prompts)) for tier in labels}
    for held_out in range(FOLDS):
        train, test = folds != held_out, folds == held_out
        for tier, label in labels.items():
            model = LogisticRegression(C=1.0, max_iter=1000).fit(features[train], label[train])
            probability[tier][test] = model.predict_proba(features[test])[:, 1]
    seconds = time.perf_counter() - start
    with open(out, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["id", "small_only", "gain"])
        for index, identifier in enumerate(ids):
            small, large = probability["small"][index], probability["large"][index]
            writer.writerow([identifier, f"{small:.6f}", f"{small - large:.6f}"])
    print(f"{len(ids)} prompts, 5-fold cross-fit of both tiers in {seconds:.1f} s: {out}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
