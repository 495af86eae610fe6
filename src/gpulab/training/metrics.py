"""Validation metrics on host arrays: top-1 accuracy, and mean ROC AUC over labels from rank statistics (no
scikit-learn needed, so it runs on GPU nodes without it)."""

from __future__ import annotations

from typing import Any


def accuracy(logits: Any, targets: Any) -> float:
    """Share of samples whose highest logit is their label."""
    import numpy as np

    if len(targets) == 0:
        return float("nan")
    return float(np.mean(np.argmax(logits, axis=1) == targets))


def _ranks(values: Any) -> Any:
    """1-based ranks, ties given their average rank."""
    import numpy as np

    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values), dtype=np.float64)
    sorted_values = values[order]
    start = 0
    while start < len(values):
        end = start
        while end + 1 < len(values) and sorted_values[end + 1] == sorted_values[start]:
            end += 1
        ranks[order[start : end + 1]] = (start + end) / 2.0 + 1.0
        start = end + 1
    return ranks


def roc_auc(scores: Any, labels: Any) -> float | None:
    """ROC AUC of one label (Mann-Whitney U / (positives × negatives)); None when only one class is present."""
    import numpy as np

    labels = np.asarray(labels) > 0.5
    positives, negatives = int(labels.sum()), int((~labels).sum())
    if positives == 0 or negatives == 0:
        return None
    ranks = _ranks(np.asarray(scores, dtype=np.float64))
    u = ranks[labels].sum() - positives * (positives + 1) / 2.0
    return float(u / (positives * negatives))


def mean_auc(scores: Any, targets: Any) -> float | None:
    """Mean ROC AUC over the labels that have both classes in the set (CheXNet's measure); None if none has."""
    aucs = [roc_auc(scores[:, k], targets[:, k]) for k in range(targets.shape[1])]
    known = [a for a in aucs if a is not None]
    return sum(known) / len(known) if known else None
