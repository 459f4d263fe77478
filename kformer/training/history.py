"""A run's history: re-read from training/history.csv across restarts, and drawn as learning curves.

Figures are made with `matplotlib.figure.Figure`, not pyplot: they draw and
save without a GUI backend, and importing kformer leaves the caller's
matplotlib backend alone (a notebook keeps showing its plots inline).
"""

import csv
from pathlib import Path

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from kformer.files import write_atomically

PANELS = [  # (title, y-axis label, [(metric, label), ...])
    ("loss (label-smoothed)", "cross-entropy", [("loss", "train"), ("val_loss", "validation")]),
    ("token accuracy", "share of tokens right", [("accuracy", "train"), ("val_accuracy", "validation")]),
    ("validation translations", "score (0-100)", [("val_bleu", "BLEU"), ("val_chrf", "chrF")]),
]


def learning_curves(history, path):
    """Saves loss and token accuracy per epoch, training against validation, and the validation
    translations' BLEU and chrF, as a PNG: a panel for each recorded (the multi-worker loop records no
    accuracy, a run without validation no BLEU)."""
    panels = [
        (title, y_label, [(metric, label) for metric, label in series if metric in history])
        for title, y_label, series in PANELS
    ]
    panels = [(title, y_label, series) for title, y_label, series in panels if series]
    if not panels:
        raise ValueError(f"no loss, accuracy or BLEU to draw, only {sorted(history)}.")
    figure = Figure(figsize=(5 * len(panels), 4))
    for axis, (title, y_label, series) in zip(figure.subplots(1, len(panels), squeeze=False)[0], panels, strict=True):
        for metric, label in series:
            axis.plot(range(1, len(history[metric]) + 1), history[metric], marker="o", label=label)
        axis.set_xlabel("epoch")
        axis.set_ylabel(y_label)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        axis.set_title(title)
        axis.grid(alpha=0.3)
        axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def forget_epochs(path, first_epoch):
    """Drops the lines of epochs `first_epoch` onwards from a CSVLogger file: a resumed run logs them again.

    Keras' CSVLogger appends across restarts, and a run killed between an
    epoch's log line and that epoch's backup reruns the epoch. The other
    lines are kept as they are (a line that does not start with an epoch
    number goes too), and the file is replaced whole, never half-written.

    Args:
        path: the history.csv; nothing happens if it does not exist.
        first_epoch: the epoch the resumed run starts at (0-based, as logged).
    """
    path = Path(path)
    if not path.is_file():
        return
    header, *lines = path.read_text(encoding="utf-8").splitlines(keepends=True) or [""]
    kept = [line for line in lines if (epoch := _epoch(line)) is not None and epoch < first_epoch]
    if len(kept) < len(lines):
        write_atomically(path, lambda partial: Path(partial).write_text(header + "".join(kept), encoding="utf-8"))


def _epoch(line):
    """The epoch number a history.csv line starts with, or None."""
    first = next(csv.reader([line]), [""])
    return int(first[0]) if first and first[0].isdigit() else None


def whole_history(path):
    """{metric: a value per epoch} of every epoch a resumed run has logged, those before the restart included.

    An epoch logged twice (by a release that left the line of an epoch it
    reran) counts once, as last logged. Columns CSVLogger left empty ("NA":
    validation metrics of a run without validation) are left out.
    """
    with open(path, newline="") as file:
        rows = list({row.pop("epoch"): row for row in csv.DictReader(file)}.values())
    names = [name for name in (rows[0] if rows else {}) if all(row[name] not in ("", "NA") for row in rows)]
    return {name: [float(row[name]) for row in rows] for name in names}
