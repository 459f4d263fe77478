"""Scoring models: translations by sacreBLEU's BLEU and chrF and exact match, a language model by perplexity."""

import bisect
import json
import math
import time
import warnings

import keras
import sacrebleu
from keras import ops

from kformer.data.pairs import DataError, check_pairs
from kformer.data.pipeline import make_dataset
from kformer.data.text import PAD_ID
from kformer.files import write_atomically, write_json
from kformer.inference.translator import OutputLimitWarning, Translator
from kformer.model_dir import TrainedModel


def score(hypotheses, references, lowercase=False):
    """sacreBLEU BLEU and chrF, and exact match, of hypotheses against one reference each."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references.")
    same = (lambda h, r: h.lower() == r.lower()) if lowercase else (lambda h, r: h == r)
    exact = sum(same(h, r) for h, r in zip(hypotheses, references, strict=True))
    return {
        "bleu": round(sacrebleu.corpus_bleu(hypotheses, [references], lowercase=lowercase).score, 2),
        "chrf": round(sacrebleu.corpus_chrf(hypotheses, [references]).score, 2),
        "exact_match": round(100.0 * exact / max(len(references), 1), 2),
        "n": len(references),
    }


LENGTH_EDGES = (1, 6, 10, 15, 25, 40)  # source words: 1-5, 6-9, 10-14, 15-24, 25-39, 40 and more


def by_length(sources, hypotheses, references, lowercase=False):
    """BLEU, chrF and output length of the sentences in each source-length bucket (`LENGTH_EDGES`, in words).

    Returns:
        A row for each bucket that has sentences: {"words": "6-9", "n", "bleu", "chrf", "length"}, the
        length the hypotheses' words over the references'. An empty source counts in the first bucket.
    """
    groups = {}
    for source, hypothesis, reference in zip(sources, hypotheses, references, strict=True):
        bucket = max(bisect.bisect_right(LENGTH_EDGES, len(source.split())) - 1, 0)
        groups.setdefault(bucket, []).append((hypothesis, reference))
    rows = []
    for bucket, pairs in sorted(groups.items()):
        low, high = LENGTH_EDGES[bucket], (LENGTH_EDGES + (None,))[bucket + 1]
        hypotheses_, references_ = ([pair[i] for pair in pairs] for i in (0, 1))
        scores = score(hypotheses_, references_, lowercase)
        words = sum(len(reference.split()) for reference in references_)
        length = sum(len(hypothesis.split()) for hypothesis in hypotheses_) / max(words, 1)
        label = f"{low}-{high - 1}" if high else f"{low}+"
        rows.append(dict(words=label, n=scores["n"], bleu=scores["bleu"], chrf=scores["chrf"], length=round(length, 3)))
    return rows


def plot_by_length(rows, path):
    """BLEU and chrF for each source-length bucket (`by_length`'s rows) as a PNG bar chart, sentences counted."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 4))
    axis = figure.subplots()
    positions = range(len(rows))
    for offset, metric in ((-0.2, "bleu"), (0.2, "chrf")):
        bars = axis.bar([p + offset for p in positions], [row[metric] for row in rows], 0.4, label=metric.upper())
        axis.bar_label(bars, fmt="%.1f", fontsize=8)
    axis.set_xticks(list(positions), [f"{row['words']}\n({row['n']:,})" for row in rows])
    axis.set_xlabel("source words (sentences)")
    axis.set_ylabel("score")
    axis.set_title("Translation quality by source length")
    axis.legend()
    figure.tight_layout()
    write_atomically(path, lambda partial: figure.savefig(partial, dpi=100, format="png"))


def perplexity(model, tokenizer, lines, max_length, batch_size=64):
    """A decoder-only model's perplexity on `lines`: exp of the mean negative log-likelihood of their tokens.

    Every token a line is trained to predict counts, [END] included, padding
    not; there is no label smoothing, so this is not exp of the training loss
    (with smoothing 0.1 that loss stays well above the true cross-entropy).
    Lines longer than `max_length` tokens are left out, as in training.
    """
    dataset = make_dataset(list(lines), None, tokenizer, batch_size, max_length, shuffle=False)
    total, tokens = 0.0, 0
    for decoder_input, labels in dataset:
        logits = ops.cast(model(decoder_input, training=False), "float32")  # (B, T, V)
        log_probs = ops.take_along_axis(ops.log_softmax(logits), labels[..., None], axis=-1)[..., 0]  # (B, T)
        real = ops.not_equal(labels, PAD_ID)
        total -= float(ops.sum(ops.where(real, log_probs, 0.0)))
        tokens += int(ops.sum(ops.cast(real, "int32")))
    return math.exp(min(total / tokens, 50.0))  # an untrained model's does not overflow


def evaluate(trained, pairs, batch_size=64, lowercase=False, xla=True):
    """Translates each source of `pairs` greedily (under XLA unless `xla=False`) and scores against its target.

    Returns:
        {"bleu", "chrf", "exact_match" (percent), "n", "seconds", "by_length" (`by_length`'s rows)}.
    """
    pairs = check_pairs(pairs)
    if not pairs:
        raise DataError("pairs is empty: give at least one (source, reference) pair to evaluate on.")
    started = time.perf_counter()
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    with warnings.catch_warnings():  # an output that stops at the limit scores as it is; the scores tell
        warnings.simplefilter("ignore", OutputLimitWarning)
        hypotheses = Translator(trained, xla=xla).translate(sources, batch_size=batch_size)
    result = score(hypotheses, references, lowercase=lowercase)
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["by_length"] = by_length(sources, hypotheses, references, lowercase)
    return result


class BestTranslations(keras.callbacks.Callback):
    """Keeps the weights that translate the validation pairs best (chrF), not those with the lowest loss.

    At each epoch's end it translates up to `sentences` validation sources
    (evenly spaced through the split: pair files are often sorted by length)
    greedily, adds `val_chrf` and `val_bleu` to the epoch's logs (for the
    history, and for EarlyStopping to watch), and keeps a copy of the weights
    when chrF is the best so far, written to `path` too. When training ends
    the best copy goes back into the model. Loss and translation quality
    disagree late in training (label smoothing rewards hedging), which is why
    MT toolkits select by a translation score.

    With a moving average of the weights (`ema`), the average is scored and
    kept, since it is what a finished run saves.

    Each new best is written to `path` and its scores beside it (best.json
    for best.weights.h5), so a run resumed after a kill goes on from the
    same record (`resume`): a later epoch must beat the best of the whole
    run, not only of the part since the restart.

    Args:
        pairs: validation (source, target) pairs.
        source_tokenizer, target_tokenizer, max_length: the model's.
        path: where to write the best weights (a Path; None: memory only).
    """

    def __init__(self, pairs, source_tokenizer, target_tokenizer, max_length, path=None, sentences=1000):
        super().__init__()
        if len(pairs) > sentences:  # evenly spread over the split (pair files often come sorted)
            pairs = [pairs[i * len(pairs) // sentences] for i in range(sentences)]
        self.sources = [s for s, _ in pairs]
        self.references = [t for _, t in pairs]
        self.tokenizers = (source_tokenizer, target_tokenizer)
        self.max_length = max_length
        self.path = path
        self.best = -1.0
        self.best_weights = None
        self._translator = None

    def _translations_score(self):
        if self._translator is None:
            trained = TrainedModel(self.model, *self.tokenizers, {"max_length": self.max_length})  # a translator
            self._translator = Translator(trained, xla=False)  # one trace; XLA would compile per shape
        with warnings.catch_warnings():  # early in training most outputs run to the limit: not worth a warning
            warnings.simplefilter("ignore", OutputLimitWarning)
            return score(self._translator.translate(self.sources), self.references)

    @property
    def _record_path(self):
        return self.path.with_name(self.path.name.removesuffix(".weights.h5") + ".json")

    def resume(self):
        """Takes up the record of the run this one resumes: its best chrF, whose weights are in `path`."""
        if self.path is not None and self.path.is_file() and self._record_path.is_file():
            self.best = json.loads(self._record_path.read_text())["chrf"]

    def _keep_if_best(self, chrf):
        if chrf > self.best:
            self.best, self.best_weights = chrf, self.model.get_weights()
            if self.path is not None:
                write_atomically(self.path, self.model.save_weights)
                # After the weights: a kill in between leaves a record no higher than the file's own score.
                write_json(self._record_path, {"chrf": chrf})

    def on_epoch_end(self, epoch, logs=None):
        optimizer = self.model.optimizer
        raw = [variable.numpy() for variable in self.model.trainable_variables] if optimizer.use_ema else None
        if raw:
            optimizer.finalize_variable_values(self.model.trainable_variables)  # the average, as fit's end does
        scores = self._translations_score()
        if logs is not None:
            logs.update(val_chrf=scores["chrf"], val_bleu=scores["bleu"])
        self._keep_if_best(scores["chrf"])
        if raw:
            for variable, value in zip(self.model.trainable_variables, raw, strict=True):
                variable.assign(value)

    def consider(self, weights):
        """Scores other `weights` (such as an average of checkpoints) like an epoch; kept if best. Returns chrF."""
        current = self.model.get_weights()
        self.model.set_weights(weights)
        chrf = self._translations_score()["chrf"]
        self._keep_if_best(chrf)
        self.model.set_weights(current)
        return chrf

    def on_train_end(self, logs=None):
        if self.best_weights is not None:
            self.model.set_weights(self.best_weights)
        elif self.best >= 0:  # resumed, and no epoch since beat the best from before the restart
            # The file holds the optimizer's state of then too; the run's own (its step count) stays.
            state = [variable.numpy() for variable in self.model.optimizer.variables]
            self.model.load_weights(self.path)
            for variable, value in zip(self.model.optimizer.variables, state, strict=True):
                variable.assign(value)
