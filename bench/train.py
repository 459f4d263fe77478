"""Translator quality and training speed on Tatoeba spa-eng: kformer vs the keras-hub peer.

Both models have the same size (d_model 256, 2+2 layers, 8 heads, d_ff 1024), learn
their vocabularies from the same training split (by unique English sentence), train one
after the other under the same wall-clock budget on this machine, and are scored with
sacreBLEU (lowercased BLEU with its 13a and intl tokenizers, and chrF, one reference
each) on the same test pairs. kformer trains with `kformer train`'s defaults given only
the budget (its recipe was chosen on the validation split: bench/recipe.py) and is
scored greedy and with beam 4; the peer trains as the keras.io example does (batch 64,
the paper's schedule) and decodes greedily with its GreedySampler. Vocabulary learning
and decoding are outside the budget.

    python bench/train.py --data ../shared/corpora/spa-eng/spa-eng.zip --minutes 25
"""

import argparse
import json
import shutil
import time
from pathlib import Path

import keras
import numpy as np
import peer
import sacrebleu

import kformer
from kformer.data.pairs import read_pairs, split_pairs
from kformer.data.pipeline import make_dataset
from kformer.training.callbacks import TimeBudget
from kformer.training.config import TrainingConfig
from kformer.training.evaluation import score
from kformer.training.objectives import TransformerSchedule

SIZE = dict(d_model=256, num_heads=8, num_layers=2, d_ff=1024)


def real_target_tokens_per_batch(dataset, batches=200):
    """Mean number of non-padding label tokens in a batch."""
    counts = [int(np.count_nonzero(labels)) for _, labels in dataset.take(batches)]
    return float(np.mean(counts))


def scores(hypotheses, pairs, seconds):
    references = [t for _, t in pairs]
    return {
        **score(hypotheses, references, lowercase=True),
        "bleu_intl": round(sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True, tokenize="intl").score, 2),
        "decode_seconds": round(seconds, 1),
        "samples": hypotheses[:8],
    }


def translate(translator, pairs):
    started = time.perf_counter()
    hypotheses = translator.translate([s for s, _ in pairs])
    return scores(hypotheses, pairs, time.perf_counter() - started)


def run_kformer(splits, minutes, out):
    config = TrainingConfig(**SIZE, minutes=minutes)
    shutil.rmtree(out, ignore_errors=True)
    trained = kformer.train_translator(splits, out, config, verbose=2)
    result = trained.config["result"]
    batches = dict(batch_size=config.batch_size, batch_tokens=config.batch_tokens)
    data = make_dataset(splits["train"], trained.source_tokenizer, trained.target_tokenizer, **batches)
    tokens_per_batch = real_target_tokens_per_batch(data)
    return {
        "steps": result["steps"],
        "train_seconds": result["seconds"],
        "real_target_tokens_per_second": round(tokens_per_batch * result["steps"] / result["seconds"], 1),
        "vocab": [trained.source_tokenizer.vocab_size, trained.target_tokenizer.vocab_size],
        "valid_chrf_kept": result.get("val_chrf_kept"),
        "greedy": translate(kformer.Translator(trained), splits["test"]),
        "beam4": translate(kformer.Translator(trained, beam_size=4), splits["test"]),
    }


def run_peer(splits, minutes):
    keras.utils.set_random_seed(0)
    source_tokenizer, target_tokenizer = peer.tokenizers(splits["train"])
    source_vocab, target_vocab = source_tokenizer.vocabulary_size(), target_tokenizer.vocabulary_size()
    model = peer.model(source_vocab, target_vocab, **SIZE)
    model.compile(
        keras.optimizers.Adam(TransformerSchedule(SIZE["d_model"], 4000), beta_1=0.9, beta_2=0.98, epsilon=1e-9),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0),
    )
    train = peer.dataset(splits["train"], source_tokenizer, target_tokenizer)
    tokens_per_batch = real_target_tokens_per_batch(train)
    budget = TimeBudget(minutes)
    started = time.perf_counter()
    model.fit(train.repeat(), epochs=10_000, steps_per_epoch=1000, callbacks=[budget], verbose=2)
    train_seconds = time.perf_counter() - started
    steps = int(model.optimizer.iterations.numpy())
    started = time.perf_counter()
    hypotheses = peer.greedy_translate(model, source_tokenizer, target_tokenizer, [s for s, _ in splits["test"]])
    return {
        "steps": steps,
        "train_seconds": round(train_seconds, 1),
        "real_target_tokens_per_second": round(tokens_per_batch * steps / train_seconds, 1),
        "vocab": [source_vocab, target_vocab],
        "greedy": scores(hypotheses, splits["test"], time.perf_counter() - started),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="spa-eng.zip (or a pair file)")
    parser.add_argument("--minutes", type=float, default=25.0, help="training budget per model")
    parser.add_argument("--out", default="/tmp/kformer-bench-train", help="scratch directory")
    parser.add_argument("--only", choices=("kformer", "peer"), help="run one side only")
    args = parser.parse_args()
    splits = split_pairs(read_pairs(args.data))
    print({name: len(pairs) for name, pairs in splits.items()}, flush=True)
    results = {}
    if args.only != "peer":
        results["kformer"] = run_kformer(splits, args.minutes, Path(args.out) / "kformer")
        print("kformer", json.dumps(results["kformer"], ensure_ascii=False), flush=True)
    if args.only != "kformer":
        results["keras-hub peer"] = run_peer(splits, args.minutes)
        print("peer", json.dumps(results["keras-hub peer"], ensure_ascii=False), flush=True)
    header = f"{'model':<22}{'steps':>7}{'BLEU':>7}{'intl':>7}{'chrF':>7}{'exact':>7}{'real tok/s':>12}{'decode s':>10}"
    print("\n" + header)
    for name, r in results.items():
        for search in ("greedy", "beam4"):
            if search in r:
                d = r[search]
                print(
                    f"{name + ' ' + search:<22}{r['steps']:>7}{d['bleu']:>7.1f}{d['bleu_intl']:>7.1f}{d['chrf']:>7.1f}"
                    f"{d['exact_match']:>7.1f}{r['real_target_tokens_per_second']:>12.0f}{d['decode_seconds']:>10.0f}"
                )
    if len(results) == 2:
        a, b = results["kformer"], results["keras-hub peer"]
        print(
            f"kformer/peer greedy: BLEU {a['greedy']['bleu'] - b['greedy']['bleu']:+.1f} points, "
            f"intl {a['greedy']['bleu_intl'] - b['greedy']['bleu_intl']:+.1f}, "
            f"real tokens/s x{a['real_target_tokens_per_second'] / b['real_target_tokens_per_second']:.2f}"
        )
    (Path(args.out) / "results.json").write_text(json.dumps(results, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
