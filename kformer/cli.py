"""`kformer ...`: argument parsing and calls into the package, nothing more."""

import argparse
import contextlib
import json
import math
import os
import sys
import warnings

import kformer
from kformer.data.stream import HELD_OUT
from kformer.deploy import FORMATS, QUANTIZATIONS
from kformer.training.config import TASKS, flags

DEMO_CONFIG = dict(
    d_model=128,
    num_heads=4,
    num_layers=2,
    d_ff=512,
    dropout=0.0,  # the built-in corpus is noise-free; dropout only slowed learning (bench/RESULTS.md)
    source_vocab_size=1000,
    target_vocab_size=1000,
    max_length=24,
    steps_per_epoch=250,
    patience=100,
)


def _load_pairs(data, held_out=HELD_OUT, sample_size=None, own=None, weights=None, verbose=1):
    """The splits of a corpus file (its training split a stream when it is large), or of the built-in corpus when
    data == "builtin"; `sample_size`: `TrainingConfig.vocab_sample`. `own`: {"valid" or "test": a pair file}
    that replaces that split, which then is not carved out of `data`. `verbose` 0: reading --data says nothing.

    `data` may be a list of corpora: their training splits are drawn by `weights` (a `Mixture`; default 1
    each), and their validation and test splits are put together."""
    from kformer.data.corpus import builtin_splits
    from kformer.data.pairs import DataError, read_pairs
    from kformer.data.stream import Mixture, corpus_splits
    from kformer.training.config import TrainingConfig

    corpora = [data] if isinstance(data, str) else list(data)
    weights = weights or [1.0] * len(corpora)
    if len(weights) != len(corpora):
        raise DataError(f"--weights gives {len(weights)} weights for {len(corpora)} --data corpora; give one each.")
    for index, corpus in enumerate(corpora):
        if corpus in corpora[:index]:
            raise DataError(f"--data {corpus}: listed twice; give each corpus once (--weights says how often).")
    own = {name: path for name, path in (own or {}).items() if path}
    fractions = {f"{name}_fraction": 0.0 for name in own}  # nothing carved out for a split the user brings
    each = [
        builtin_splits()
        if corpus == "builtin"
        else corpus_splits(corpus, sample_size or TrainingConfig.vocab_sample, held_out, verbose=verbose, **fractions)
        for corpus in corpora
    ]
    splits = each[0]
    if len(each) > 1:
        splits = {name: [pair for split in each for pair in split[name]] for name in ("valid", "test")}
        splits["train"] = Mixture([split["train"] for split in each], weights)
    for name, path in own.items():
        if any(other != name and other_path == path for other, other_path in own.items()) or path in corpora:
            raise DataError(f"--{name} {path}: the same file is given twice; give each split its own file.")
        try:
            splits[name] = read_pairs(path)
        except DataError as error:
            raise DataError(f"--{name} {error}") from None
    return splits


def _leaks(splits):
    """{"valid" or "test": how many of its pairs have a source the training pairs have too} (a stream's sample)."""
    train = splits["train"]
    sources = {source for source, _ in getattr(train, "sample", train)}
    return {name: sum(source in sources for source, _ in splits[name]) for name in ("valid", "test") if splits[name]}


def _config(args, **overrides):
    from kformer.training.config import ARCHITECTURE, ConfigError, TrainingConfig

    settings = dict(overrides)
    for name in TrainingConfig.__dataclass_fields__:
        value = getattr(args, name, None)
        if value is not None:
            settings[name] = value
    if getattr(args, "vocab_size", None) is not None:
        settings["source_vocab_size"] = settings["target_vocab_size"] = args.vocab_size
    try:
        config = TrainingConfig(**settings)
        if config.init_from:
            from kformer.training.jobs import refuse_new_architecture

            refuse_new_architecture(config.init_from, {k: v for k, v in settings.items() if k in ARCHITECTURE})
        return config
    except ConfigError as error:  # named by the flag the user typed
        flag = "vocab-size" if error.name.endswith("_vocab_size") else error.name.replace("_", "-")
        raise _UsageError(error.describe(f"--{flag}")) from None


def _load_translator(path):
    """The translator in model directory `path`; a language model there is a usage error, not a traceback."""
    from kformer.model_dir import load
    from kformer.training.tasks import TRANSLATION, require

    return require(load(path), TRANSLATION, path, "for a language model use `kformer generate`")


def _print_scores(name, scores):
    print(
        f"{name}: BLEU {scores['bleu']:.1f}  chrF {scores['chrf']:.1f}  "
        f"exact match {scores['exact_match']:.1f}%  ({scores['n']:,} sentences, {scores['seconds']:.0f} s)"
    )
    rows = scores.get("by_length", [])
    if len(rows) > 1:
        print("  source words  sentences   BLEU   chrF  length (words, output over reference)")
        for row in rows:
            print(f"  {row['words']:>12}  {row['n']:9,}  {row['bleu']:5.1f}  {row['chrf']:5.1f}  {row['length']:6.2f}")


def _demo(args):
    from kformer.data.corpus import SEED_SENTENCES, builtin_splits
    from kformer.inference.translator import Translator
    from kformer.training.evaluation import evaluate
    from kformer.training.jobs import train_translator

    splits = builtin_splits()
    print(
        f"Built-in English->Spanish corpus: {len(splits['train']):,} training pairs, "
        f"{len(splits['test']):,} compositional test pairs (adjective-noun pairs never seen in training)."
    )
    config = _config(args, **DEMO_CONFIG)  # and --minutes, a TrainingConfig setting
    trained = train_translator(splits, args.out, config, args.verbose, overwrite=True)  # a demo reruns from scratch
    result = trained.config["result"]
    print(f"Trained {result['steps']:,} steps in {result['seconds']:.0f} s.")
    _print_scores("held-out test", evaluate(trained, splits["test"]))
    translator = Translator(trained)
    for sentence, translation in zip(SEED_SENTENCES, translator.translate(SEED_SENTENCES), strict=True):
        print(f"  {sentence}  ->  {translation}")
    print(f"Saved the model directory to {args.out}/ (learning curves: {args.out}/learning_curves.png).")


def _train(args):
    from kformer.data.pairs import read_lines, split_of
    from kformer.training.evaluation import evaluate
    from kformer.training.jobs import is_chief, train_language_model, train_translator

    config = _config(args)
    if args.task == "lm":
        if len(args.data) > 1 or args.weights:
            raise _UsageError("--task lm reads one text file: give one --data, without --weights.")
        args.data = args.data[0]
        if args.data == "builtin":
            splits = _load_pairs("builtin")
            lines, valid_lines = [t for _, t in splits["train"]], [t for _, t in splits["valid"]]
        else:  # one line in fifty held out, chosen by its text's hash as split_pairs chooses
            held = {"train": [], "valid": []}
            for line in read_lines(args.data):
                held[split_of(line, test_fraction=0.0)].append(line)
            lines, valid_lines = held["train"], held["valid"]
        trained = train_language_model(lines, args.out, config, args.verbose, args.overwrite, valid_lines)
        if not is_chief(config):
            print(f"Done: this worker's part of the training; the chief saves the language model to {args.out}/.")
            return
        summary = trained.config["result"]
        if "val_perplexity" in summary:
            print(f"Perplexity on {len(valid_lines):,} held-out lines: {summary['val_perplexity']:.1f}.")
        else:
            print(f"No line held out to measure perplexity on (one in fifty is); training loss {summary['loss']:.3f}.")
        print(f'Saved the language model to {args.out}/ (try: kformer generate --model {args.out} "el gato").')
        return
    own = {"valid": args.valid, "test": args.test}
    splits = _load_pairs(args.data, args.held_out, config.vocab_sample, own, args.weights, args.verbose)
    for name, count in _leaks(splits).items():
        if count:
            print(
                f"warning: {count:,} of the {len(splits[name]):,} {name} pairs have a source that the training pairs "
                "have too; their scores will look better than unseen text's.",
                file=sys.stderr,
            )
    trained = train_translator(splits, args.out, config, args.verbose, args.overwrite)
    if not is_chief(config):  # a multi-worker cluster's other workers: the chief scores and saves
        print(f"Done: this worker's part of the training; the chief saves the model directory to {args.out}/.")
        return
    if splits.get("test"):
        _print_scores("test split", evaluate(trained, splits["test"], xla=config.jit_compile is not False))
    print(f"Saved the model directory to {args.out}/.")


def _evaluate(args):
    from kformer.data.pairs import read_pairs
    from kformer.training.evaluation import evaluate, plot_by_length

    trained = _load_translator(args.model)
    pairs = _load_pairs(args.data)["test"] if args.data == "builtin" else read_pairs(args.data)
    scores = evaluate(trained, pairs, lowercase=args.lowercase)
    if args.plot:
        plot_by_length(scores["by_length"], args.plot)
    if args.json:
        print(json.dumps(scores))
    else:
        _print_scores(args.data, scores)


def _translate(args):
    from kformer.inference.translator import OutputLimitWarning, SentenceTooLong, Translator

    trained = _load_translator(args.model)
    vocab_size = trained.target_tokenizer.vocab_size
    if args.beam > vocab_size:
        raise _UsageError(
            f"--beam {args.beam} is more than the {vocab_size:,} tokens of {args.model}'s target vocabulary; "
            f"give at most {vocab_size}."
        )
    if args.n_best > args.beam:
        raise _UsageError(f"--n-best {args.n_best} is more than --beam {args.beam} keeps; give --beam {args.n_best}.")
    settings = dict(beam_size=args.beam, length_penalty=args.length_penalty, max_output_ratio=args.max_output_ratio)
    settings["no_repeat_ngram"] = args.no_repeat_ngram
    try:
        translator = Translator(trained, **settings, **_sampling(args))
    except ValueError as error:
        message = str(error)
        for name, flag in (("beam_size=1", "--beam 1"), ("temperature=", "--temperature "), ("top_", "--top-")):
            message = message.replace(name, flag)
        raise _UsageError(message.replace("--top-k=", "--top-k ").replace("--top-p=", "--top-p ")) from None
    scored = args.scores or args.json or args.n_best > 1
    index = 0
    for batch in [args.sentences] if args.sentences else _stdin_batches(args.batch_size):
        prefix = None if args.prefix is None else [args.prefix] * len(batch)
        options = dict(n_best=args.n_best, with_scores=True) if scored else {}
        options["with_alignments"] = args.alignments
        try:
            with warnings.catch_warnings(record=True) as said:
                warnings.simplefilter("always", OutputLimitWarning)
                results = translator.translate(batch, batch_size=args.batch_size, prefix=prefix, **options)
        except SentenceTooLong as error:
            where = f"argument {index + error.index + 1}" if args.sentences else f"stdin line {index + error.index + 1}"
            flags = "--n-best, --scores, --json, --prefix and --alignments"
            message = str(error).replace(f"sentence {error.index + 1}", where, 1)
            raise _UsageError(message.replace("n_best, with_scores, prefix and with_alignments", flags)) from None
        except ValueError as error:  # a prefix the target vocabulary cannot read, or too long
            raise _UsageError(f"--prefix {args.prefix!r}: {error}") from None
        for warning in said:
            if not isinstance(warning.message, OutputLimitWarning):  # another's: shown as it would have been
                warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)
            for line in getattr(warning.message, "lines", []):
                where = f"argument {index + line + 1}" if args.sentences else f"stdin line {index + line + 1}"
                print(
                    f"kformer: warning: {where}: its translation stopped at the output limit before its end and may "
                    f"be cut short; raise --max-output-ratio (now {args.max_output_ratio:g}).",
                    file=sys.stderr,
                )
        if not scored:
            for translation in results:
                print(translation if not args.alignments else " ||| ".join(translation), flush=True)
            index += len(batch)
            continue
        for source, hypotheses in zip(batch, results, strict=True):
            hypotheses = hypotheses if args.n_best > 1 else [hypotheses]
            if args.json:
                found = [
                    {"translation": text, "score": round(score, 4), **({"alignment": aligned[0]} if aligned else {})}
                    for text, score, *aligned in hypotheses
                ]
                print(json.dumps({"index": index, "source": source, "hypotheses": found}, ensure_ascii=False))
            for text, score, *aligned in [] if args.json else hypotheses:
                columns = ([str(index)] if args.n_best > 1 else []) + ([f"{score:.4f}"] if args.scores else [])
                print("\t".join([*columns, " ||| ".join([text, *aligned])]))
            index += 1
        sys.stdout.flush()


def _score(args):
    from kformer.data.pairs import read_pairs
    from kformer.inference.translator import Translator

    translator = Translator(_load_translator(args.model))
    pairs = read_pairs(args.data)
    for start in range(0, len(pairs), args.batch_size):
        batch = pairs[start : start + args.batch_size]
        scores = translator.score([s for s, _ in batch], [t for _, t in batch], batch_size=args.batch_size)
        for (source, target), score in zip(batch, scores, strict=True):
            if args.json:
                line = dict(source=source, target=target, log_prob=round(score.log_prob, 4), tokens=score.tokens)
                line["token_log_probs"] = [round(value, 4) for value in score.token_log_probs]
                print(json.dumps(line, ensure_ascii=False))
            else:
                print(f"{score.log_prob:.4f}\t{score.tokens}\t{source}\t{target}")
        sys.stdout.flush()


def _sampling(args):
    """The sampling flags `kformer translate` and `kformer generate` share, as keyword arguments."""
    return dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed)


def _generate(args):
    from kformer.inference.generator import Generator

    try:
        generator = Generator(args.model, max_new_tokens=args.max_tokens, **_sampling(args))
    except ValueError as error:
        raise _UsageError(error) from None
    for batch in [args.prompts] if args.prompts else _stdin_batches(args.batch_size):
        for continuation in generator.generate(batch):
            print(continuation, flush=True)


def _stdin_batches(batch_size):
    """Lines of stdin in batches, so a long stream is translated as it arrives.

    Every line gives one output line: a line that is not UTF-8 is read with
    its bad bytes as U+FFFD, and stderr says which line it was.
    """
    batch = []
    raw_lines = getattr(sys.stdin, "buffer", None)  # None when stdin was replaced by a text stream
    if raw_lines is None:
        raw_lines = (line.encode("utf-8", errors="surrogateescape") for line in sys.stdin)
    for number, raw in enumerate(raw_lines, start=1):
        try:
            line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError:
            line = raw.decode("utf-8", errors="replace")
            print(f"kformer: stdin line {number} is not UTF-8; its bad bytes were read as U+FFFD.", file=sys.stderr)
        batch.append(line.rstrip("\r\n"))
        if len(batch) == batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


def _attention(args):
    from kformer.teaching import plots

    trained = _load_translator(args.model)
    try:
        plots.attention_heatmaps(trained, args.sentence, args.out)
    except ValueError as error:
        raise _UsageError(error) from None
    print(f"Saved the attention heatmaps to {args.out}.")


def _export(args):
    from kformer.deploy.export import export

    export(
        args.model,
        args.out,
        formats=[f.strip() for f in args.formats.split(",") if f.strip()],
        quantize=[q.strip() for q in args.quantize.split(",") if q.strip()],
        name=args.name,
        version=args.version,
        beam_size=args.beam,
        length_penalty=args.length_penalty,
        max_new_tokens=args.max_tokens,
        xla=args.xla,
    )


def _walkthrough(args):
    from kformer.teaching import walkthrough

    print(walkthrough.bumrah_report())
    print()
    print(walkthrough.black_cat_report())


def _number(convert, accepts, wanted):
    """An argparse type: `convert(text)` where `accepts` the value, else "expected `wanted`"."""

    def parse(text):
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not accepts(value):
            raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}")
        return value

    return parse


_positive_int = _number(int, lambda value: value >= 1, "a positive whole number")  # a count, a size
_non_negative_int = _number(int, lambda value: value >= 0, "a whole number of 0 or more")  # 0: off
_positive_float = _number(float, lambda value: 0 < value < math.inf, "a number above 0")  # a ratio
_non_negative_float = _number(float, lambda value: 0 <= value < math.inf, "a number of 0 or more")  # a penalty


def _add_training_flags(parser):
    """A flag for each `TrainingConfig` setting, with the field's help; one --vocab-size for both sides; --no-xla."""
    group = parser.add_argument_group("model and training (defaults: the paper's recipe at small scale)")
    for name, kind, default, text, choices in flags():
        text += "" if default is None or default is False else f" (default: {default})"
        switch = dict(action="store_const", const=True) if kind is bool else dict(type=kind, choices=choices)
        group.add_argument("--" + name.replace("_", "-"), help=text, **switch)
    group.add_argument("--vocab-size", type=int, help="WordPiece vocabulary size per side (default: 8000)")
    group.add_argument(
        "--no-xla",
        dest="jit_compile",
        action="store_const",
        const=False,
        help="train, and translate the test split after, without XLA (training's default under "
        "--mixed-precision on a CPU, where it is faster)",
    )


def build_parser():
    parser = argparse.ArgumentParser(prog="kformer", description="A Transformer built from scratch as Keras 3 layers.")
    parser.add_argument(
        "--quiet",
        dest="verbose",
        action="store_const",
        const=0,
        default=1 if sys.stdout.isatty() else 2,
        help="demo, train: only the results and warnings, no progress or training notes (default: a live bar on a "
        "terminal; in logs, a line an epoch and every twentieth of a --minutes budget)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add_command in (
        _demo_parser,
        _train_parser,
        _evaluate_parser,
        _translate_parser,
        _score_parser,
        _generate_parser,
        _attention_parser,
        _export_parser,
        _walkthrough_parser,
    ):
        add_command(commands)
    return parser


def _demo_parser(commands):
    demo = commands.add_parser("demo", help="train a translator on the built-in corpus (about 3 minutes on 2 cores)")
    demo.add_argument("--out", default="kformer-demo", help="model directory to write (default: %(default)s)")
    demo.add_argument("--minutes", type=float, default=2.6, help="training budget (default: %(default)s)")
    demo.set_defaults(run=_demo)


def _train_parser(commands):
    train = commands.add_parser("train", help="train on a file of sentence pairs (or 'builtin')")
    train.add_argument(
        "--data",
        required=True,
        nargs="+",
        help="a .txt/.tsv/.zip/.gz of 'source<TAB>target' lines, two aligned files 'train.en,train.es', "
        "or 'builtin' (with --task lm: text, one passage a line); files over 64 MB are read as a stream. "
        "Several corpora are trained on together, drawn by --weights",
    )
    train.add_argument(
        "--weights",
        nargs="+",
        type=_positive_float,
        help="one a --data corpus: how often its pairs are drawn, relative to the others' (default: 1 each)",
    )
    train.add_argument(
        "--held-out",
        type=_positive_int,
        default=HELD_OUT,
        help="the most validation and test pairs kept from --data (default: %(default)s)",
    )
    for name, use in (("valid", "keep-best, early stopping and each epoch's scores"), ("test", "the final report")):
        train.add_argument(
            f"--{name}",
            metavar="FILE",
            help=f"your own {name} pairs (a pair file or 'a.en,a.es') for {use}; then none are carved out of --data",
        )
    train.add_argument("--out", required=True, help="model directory to write; rerun with the same one to resume")
    train.add_argument(
        "--task",
        choices=TASKS,
        default="translate",
        help="translate: sentence pairs; lm: decoder-only on text (default: %(default)s)",
    )
    train.add_argument("--overwrite", action="store_true", help="train a new model over a finished one in --out")
    _add_training_flags(train)
    train.set_defaults(run=_train)


def _evaluate_parser(commands):
    evaluate = commands.add_parser("evaluate", help="BLEU, chrF and exact match of a model on a pair file")
    evaluate.add_argument("--model", required=True, help="model directory")
    evaluate.add_argument(
        "--data", required=True, help="a pair file, 'test.en,test.es', or 'builtin' for the built-in test split"
    )
    evaluate.add_argument("--json", action="store_true", help="print one JSON object")
    evaluate.add_argument("--lowercase", action="store_true", help="case-insensitive BLEU and exact match")
    evaluate.add_argument("--plot", metavar="PNG", help="draw BLEU and chrF by source length into this PNG file")
    evaluate.set_defaults(run=_evaluate)


def _translate_parser(commands):
    translate = commands.add_parser(
        "translate",
        help="translate sentences given as arguments or on stdin",
        description="Prints one translation a line; with --n-best K, K lines a sentence, each 'index<TAB>translation' "
        "(the sentence's index from 0); --scores adds a column 'score' before the translation, the search's "
        "log-probability over GNMT's length penalty; --json prints one object a sentence instead.",
    )
    translate.add_argument("--model", required=True, help="model directory")
    translate.add_argument("sentences", nargs="*", help="sentences (default: one per line on stdin)")
    translate.add_argument("--beam", type=_positive_int, default=1, help="beam size (default: 1, greedy)")
    translate.add_argument(
        "--n-best",
        type=_positive_int,
        default=1,
        help="hypotheses a sentence, best first (at most --beam; default: %(default)s)",
    )
    translate.add_argument("--scores", action="store_true", help="print each hypothesis's score")
    translate.add_argument(
        "--length-penalty",
        type=_non_negative_float,
        default=0.6,
        help="GNMT's alpha: beam search ranks by log p / ((5 + length) / 6)^alpha (default: %(default)s; 0: none)",
    )
    translate.add_argument(
        "--json", action="store_true", help="one JSON object a sentence: its index, source and scored hypotheses"
    )
    translate.add_argument(
        "--prefix", help="target text every translation must start with; the rest is decoded after it"
    )
    translate.add_argument(
        "--alignments",
        action="store_true",
        help="each translation's word alignment to its source, in Pharaoh format, after ' ||| ' (as Marian prints it)",
    )
    translate.add_argument(
        "--max-output-ratio",
        type=_positive_float,
        default=2.0,
        help="a translation has at most this many tokens a source token, + 10, and at least the model's max_length "
        "(default: %(default)s)",
    )
    translate.add_argument(
        "--no-repeat-ngram",
        type=_non_negative_int,
        default=0,
        metavar="N",
        help="no n-gram of N tokens twice in a translation (default: 0, no such rule)",
    )
    _add_sampling_flags(translate, "with --beam 1, for back-translation")
    translate.add_argument(
        "--batch-size", type=_positive_int, default=64, help="sentences decoded at once (default: %(default)s)"
    )
    translate.set_defaults(run=_translate)


def _add_sampling_flags(parser, where=""):
    """--temperature, --top-k, --top-p and --seed, as `decoding.sampler` takes them."""
    where = f" ({where})" if where else ""
    parser.add_argument("--temperature", type=float, default=0.0, help=f"0: greedy (default); above 0: sample{where}")
    parser.add_argument("--top-k", type=int, default=0, help="sample among the k most likely (0: all)")
    parser.add_argument("--top-p", type=float, default=1.0, help="sample from this probability mass")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default: 0)")


def _score_parser(commands):
    score = commands.add_parser(
        "score",
        help="the log-probability of each given translation under a model",
        description="Prints 'log_prob<TAB>tokens<TAB>source<TAB>target' for each pair of --data: the natural-log "
        "probability of the target's tokens and [END] given the source (their number in the second column), "
        "for filtering a corpus or reranking; --json adds each token's.",
    )
    score.add_argument("--model", required=True, help="model directory")
    score.add_argument("--data", required=True, help="a pair file or 'test.en,test.es', as for evaluate")
    score.add_argument("--json", action="store_true", help="one JSON object a pair, with each token's log-probability")
    score.add_argument(
        "--batch-size", type=_positive_int, default=64, help="pairs scored together (default: %(default)s)"
    )
    score.set_defaults(run=_score)


def _generate_parser(commands):
    generate = commands.add_parser("generate", help="continue prompts with a language model (train --task lm)")
    generate.add_argument("--model", required=True, help="language-model directory")
    generate.add_argument("prompts", nargs="*", help="prompts (default: one per line on stdin)")
    generate.add_argument(
        "--max-tokens", type=_positive_int, default=50, help="most tokens to write (default: %(default)s)"
    )
    _add_sampling_flags(generate)
    generate.add_argument(
        "--batch-size", type=_positive_int, default=64, help="prompts generated together (default: %(default)s)"
    )
    generate.set_defaults(run=_generate)


def _attention_parser(commands):
    attention = commands.add_parser("attention", help="draw the attention heatmaps of one translation")
    attention.add_argument("--model", required=True, help="model directory")
    attention.add_argument("sentence", help="the source sentence")
    attention.add_argument("--out", default="attention.png", help="PNG to write (default: %(default)s)")
    attention.set_defaults(run=_attention)


def _export_parser(commands):
    export = commands.add_parser("export", help="write SavedModel (TF Serving), TFLite, ONNX and CTranslate2 artifacts")
    export.add_argument("--model", required=True, help="model directory")
    export.add_argument("--out", required=True, help="export directory to create")
    export.add_argument("--formats", default=",".join(FORMATS), help="comma-separated (default: %(default)s)")
    export.add_argument(
        "--xla", action="store_true", help="decode under XLA in the SavedModel (see export/README.md: TF Serving)"
    )
    export.add_argument(
        "--quantize", default="", help=f"TFLite and CTranslate2 variants to add, of {','.join(QUANTIZATIONS)}"
    )
    export.add_argument("--name", default="kformer", help="TF Serving model name (default: %(default)s)")
    export.add_argument("--version", type=int, default=1, help="TF Serving version directory (default: 1)")
    export.add_argument(
        "--beam", type=_positive_int, default=1, help="beam size the artifacts decode with (default: 1)"
    )
    export.add_argument(
        "--length-penalty",
        type=_non_negative_float,
        help="GNMT's alpha the artifacts' beam search ranks by (default: kformer translate's, 0.6); "
        "the CTranslate2 client's default",
    )
    export.add_argument(
        "--max-tokens",
        type=_positive_int,
        default=50,
        help="language models: most tokens written after a prompt (default: %(default)s)",
    )
    export.set_defaults(run=_export)


def _walkthrough_parser(commands):
    walkthrough = commands.add_parser(
        "walkthrough", help="print the seeds' worked examples, computed by kformer's layers"
    )
    walkthrough.set_defaults(run=_walkthrough)


class _UsageError(Exception):
    """A bad setting found after parsing; main prints it as one line."""


@contextlib.contextmanager
def _quiet_native_stderr():
    """Hides what TensorFlow's C++ start-up writes to fd 2 before its logging is set up.

    On CPU machines it prints CUDA probing and oneDNN notes that bury the
    output people came for, and TF_CPP_MIN_LOG_LEVEL does not reach those
    lines. This is the command's business, in its own process: importing
    kformer as a library leaves fd 2 alone. TF_CPP_MIN_LOG_LEVEL=0 keeps them.
    """
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL") == "0" or "tensorflow" in sys.modules:
        yield
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def main(argv=None):
    args = build_parser().parse_args(argv)  # --help and usage errors answer before TensorFlow loads
    with _quiet_native_stderr():
        kformer.register_keras_objects()  # loads TensorFlow; a library import does this at `import kformer`

    from kformer.data.pairs import DataError
    from kformer.deploy.export import ExportError
    from kformer.model_dir import ModelDirectoryError
    from kformer.training.callbacks import TrainingDiverged, TrainingInterrupted, WorkerLost

    try:
        args.run(args)
    except (DataError, ModelDirectoryError, ExportError, _UsageError) as error:
        print(f"kformer {args.command}: error: {error}", file=sys.stderr)
        return 2
    except TrainingInterrupted as stop:
        print(f"kformer {args.command}: {stop}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:  # outside training, or a second Ctrl-C during it
        print(f"kformer {args.command}: interrupted.", file=sys.stderr)
        return 130
    except (TrainingDiverged, WorkerLost) as error:
        print(f"kformer {args.command}: error: {error}", file=sys.stderr)
        return 1
    except OSError as error:  # disk full, permissions: what the system said, and where
        where = f"{error.filename}: " if error.filename else ""
        print(f"kformer {args.command}: error: {where}{error.strerror or error}.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
