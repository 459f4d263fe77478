"""A run's history: re-read from training/history.csv across restarts, and drawn as learning curves.

Figures are made with `matplotlib.figure.Figure`, not pyplot: they draw and
save without a GUI backend, and importing kformer leaves the caller's
matplotlib backend alone (a notebook keeps showing its plots inline).
"""

import csv

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


def whole_history(path):
    """{metric: a value per epoch} of every epoch a resumed run has logged, those before the restart included.

    An epoch logged again (a kill between its log line and its backup) counts once, as last logged.
    Columns CSVLogger left empty ("NA": validation metrics of a run without validation) are left out.
    """
    with open(path, newline="") as file:
        rows = list({row.pop("epoch"): row for row in csv.DictReader(file)}.values())
    names = [name for name in (rows[0] if rows else {}) if all(row[name] not in ("", "NA") for row in rows)]
    return {name: [float(row[name]) for row in rows] for name in names}
