"""Word alignments from cross-attention, against the built-in grammar's own: which decoder layer aligns best.

The built-in corpus keeps each phrase's order across the languages, and each English word has one Spanish
word of its kind (determiner, noun, adjective, verb, "that"/"que", preposition), so the n-th word of a kind
in one sentence is the n-th of that kind in the other: that is the true alignment (the Spanish personal "a"
and the "de" of "cerca de" have no English word and are left out). Each layer's alignments (`Translator.align`
on the reference translations, heads averaged) are scored by the share of Spanish words linked to their true
English word, on the validation split to choose the layer and then once on the test split. Then what alignments cost:
`translate` of 512 test sentences with and without them, best of 3 rounds each.

    python bench/alignments.py --model kformer-demo
"""

import argparse
import time

from kformer import Translator, builtin_splits, load
from kformer.data.corpus import ADJECTIVES, ANIMATE, DETERMINERS, INTRANSITIVE, PLACES, PREPOSITIONS, THINGS, TRANSITIVE


def _kinds():
    """{word: kind} for each language."""
    english = {w: "determiner" for forms, _ in DETERMINERS for w in forms} | {"that": "that"}
    spanish = {w: "determiner" for _, forms in DETERMINERS for w in forms} | {"al": "determiner", "del": "determiner"}
    spanish["que"] = "that"
    for kind, words, en_forms, es_forms in [
        ("noun", ANIMATE + THINGS + PLACES, ["english", "english_plural"], ["spanish", "spanish_plural"]),
        ("adjective", ADJECTIVES, ["english"], ["masculine", "feminine", "masculine_plural", "feminine_plural"]),
        ("verb", INTRANSITIVE + TRANSITIVE, ["english", "english_plural", "english_past"],
         ["spanish", "spanish_plural", "spanish_past", "spanish_past_plural"]),
    ]:  # fmt: skip
        english |= {getattr(word, form): kind for word in words for form in en_forms}
        spanish |= {getattr(word, form): kind for word in words for form in es_forms}
    english |= {e: "preposition" for e, _ in PREPOSITIONS}
    spanish |= {s.split()[0]: "preposition" for _, s in PREPOSITIONS}
    return english, spanish


def true_alignment(english, spanish, kinds):
    """{Spanish word index: English word index}, or None where a kind's counts differ (then the pair is skipped)."""
    by_kind = [{}, {}]
    for side, words, table in ((0, english.split(), kinds[0]), (1, spanish.split(), kinds[1])):
        for index, word in enumerate(words):
            by_kind[side].setdefault(table.get(word), []).append(index)
    by_kind[0].pop(None, None), by_kind[1].pop(None, None)  # "a" (personal), "de"
    if {k: len(v) for k, v in by_kind[0].items()} != {k: len(v) for k, v in by_kind[1].items()}:
        return None
    return {j: i for kind, js in by_kind[1].items() for i, j in zip(by_kind[0][kind], js, strict=True)}


def accuracy(translator, pairs, layer, kinds):
    gold = [true_alignment(s, t, kinds) for s, t in pairs]
    kept = [(pair, g) for pair, g in zip(pairs, gold, strict=True) if g is not None]
    found = translator.align([s for (s, _), _ in kept], [t for (_, t), _ in kept], layer=layer)
    right = total = 0
    for links, (_, g) in zip(found, kept, strict=True):
        linked = {int(j): int(i) for i, j in (link.split("-") for link in links.split())}
        right += sum(linked.get(j) == i for j, i in g.items())
        total += len(g)
    return right / total, len(kept), total


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a translator trained on the built-in corpus")
    args = parser.parse_args()
    trained = load(args.model)
    translator, kinds, splits = Translator(trained), _kinds(), builtin_splits()
    layers = len(trained.model.get_layer("decoder").blocks)
    print("| layer | valid: words right | pairs | words |\n| --- | --- | --- | --- |")
    scores = {}
    for layer in range(layers):
        scores[layer], pairs, words = accuracy(translator, splits["valid"], layer, kinds)
        print(f"| {layer} | {scores[layer]:.1%} | {pairs} | {words} |")
    best = max(scores, key=scores.get)
    score, pairs, words = accuracy(translator, splits["test"], best, kinds)
    print(f"\nLayer {best} (chosen on valid) on the test split: {score:.1%} of {words} words right ({pairs} pairs).")
    sources = [s for s, _ in splits["test"][:512]]
    translator.translate(sources, with_alignments=True)  # warm up both paths
    times = {False: [], True: []}
    for _ in range(3):
        for aligned in times:
            started = time.perf_counter()
            translator.translate(sources, with_alignments=aligned)
            times[aligned].append(time.perf_counter() - started)
    plain, aligned = min(times[False]), min(times[True])
    print(
        f"Translating 512 test sentences (best of 3): {plain:.2f} s, with alignments {aligned:.2f} s "
        f"({aligned / plain:.2f}x)."
    )


if __name__ == "__main__":
    main()
