"""Scoring translations: sacreBLEU's BLEU and chrF, and exact match."""

import time

import sacrebleu

from kformer.translator import Translator


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


def evaluate(trained, pairs, batch_size=64, lowercase=False):
    """Translates each source of `pairs` greedily and scores against its target.

    Returns:
        {"bleu", "chrf", "exact_match" (percent), "n", "seconds"}.
    """
    started = time.perf_counter()
    hypotheses = Translator(trained).translate([s for s, _ in pairs], batch_size=batch_size)
    result = score(hypotheses, [t for _, t in pairs], lowercase=lowercase)
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result
