"""Classification metrics from predictions and targets: accuracy, per-class scores, confusion matrix."""

from __future__ import annotations

import torch


def confusion_matrix(predictions: torch.Tensor, targets: torch.Tensor, num_classes: int) -> torch.Tensor:
    """(num_classes, num_classes) counts; row = true class, column = predicted class."""
    index = targets.long() * num_classes + predictions.long()
    return torch.bincount(index, minlength=num_classes**2).reshape(num_classes, num_classes)


def classification_metrics(predictions: torch.Tensor, targets: torch.Tensor, num_classes: int) -> dict:
    """Top-1 accuracy, per-class accuracy (= recall), macro precision/recall/F1 and the confusion matrix.

    A class never predicted has precision 0; a class absent from the targets is left out of
    the macro averages (its recall is undefined).
    """
    matrix = confusion_matrix(predictions, targets, num_classes).double()
    true_positives = matrix.diagonal()
    support, predicted = matrix.sum(1), matrix.sum(0)
    recall = true_positives / support.clamp(min=1)
    precision = true_positives / predicted.clamp(min=1)
    f1 = 2 * precision * recall / (precision + recall).clamp(min=1e-12)
    present = support > 0
    return {
        "accuracy": (true_positives.sum() / matrix.sum().clamp(min=1)).item(),
        "per_class_accuracy": recall.tolist(),
        "macro_precision": precision[present].mean().item(),
        "macro_recall": recall[present].mean().item(),
        "macro_f1": f1[present].mean().item(),
        "confusion_matrix": matrix.long().tolist(),
    }
