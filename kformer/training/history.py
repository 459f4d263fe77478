"""A run's history: re-read from training/history.csv across restarts, and drawn as learning curves.

Figures are made with `matplotlib.figure.Figure`, not pyplot: they draw and
save without a GUI backend, and importing kformer leaves the caller's
matplotlib backend alone (a notebook keeps showing its plots inline).
"""

import csv
import os

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator


def learning_curves(history, path):
    """Saves loss and token accuracy per epoch, training against validation, as a PNG."""
    figure = Figure(figsize=(10, 4))
    loss_axis, accuracy_axis = figure.subplots(1, 2)
    for axis, metric, label in [
        (loss_axis, "loss", "loss (label-smoothed)"),
        (accuracy_axis, "accuracy", "token accuracy"),
    ]:
        epochs = range(1, len(history.get(metric, [])) + 1)
        axis.plot(epochs, history.get(metric, []), marker="o", label="train")
        if f"val_{metric}" in history:
            axis.plot(epochs, history[f"val_{metric}"], marker="o", label="validation")
        axis.set_xlabel("epoch")
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.set_title(label)
        axis.grid(alpha=0.3)
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def forget_epochs(path, first_epoch):
    """Drops the rows of `first_epoch` onwards from a CSVLogger file: a resumed run logs them again.

    Keras' CSVLogger appends across restarts, and a run killed between an
    epoch's log line and that epoch's backup reruns the epoch. The file is
    replaced whole, never left half-written.
    """
    if not os.path.exists(path):
        return
    with open(path, newline="") as file:
        rows = list(csv.DictReader(file))
        fields = rows[0].keys() if rows else []
    kept = [row for row in rows if int(row["epoch"]) < first_epoch]
    if len(kept) == len(rows):
        return
    partial = f"{path}.partial"
    with open(partial, "w", newline="") as file:
        writer = csv.DictWriter(file, fields)
        writer.writeheader()
        writer.writerows(kept)
    os.replace(partial, path)


def whole_history(path):
    """{metric: a value per epoch} of every epoch a resumed run has logged, those before the restart included.

    Columns CSVLogger left empty ("NA": validation metrics of a run without validation) are left out.
    """
    with open(path, newline="") as file:
        rows = list(csv.DictReader(file))
    names = [name for name in (rows[0] if rows else {}) if name != "epoch"]
    names = [name for name in names if all(row[name] not in ("", "NA") for row in rows)]
    return {name: [float(row[name]) for row in rows] for name in names}
