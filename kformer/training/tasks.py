"""The two tasks kformer trains and serves, and all that differs between them, in one place.

`TRANSLATION` reads sentence pairs and trains an encoder-decoder (`build_transformer`) that `Translator`
decodes; `LANGUAGE_MODEL` reads lines of text as text (no source side: no source tokenizer) and trains a
decoder alone (`build_decoder_only`) that `Generator` continues. A model directory's config.json names its
task (`"kind"`, which `model_dir.load` checks); `task_of` maps that name to its task once, and the jobs, the
export and the CLI ask the task rather than compare names.
"""

import dataclasses

from kformer.data.pairs import DataError
from kformer.data.pipeline import fits, make_dataset, pair_lengths
from kformer.data.text import Tokenizer, build_vocabularies, check_sentences
from kformer.files import write_atomically
from kformer.inference.decoding import ranking_scores
from kformer.inference.generator import Generator
from kformer.inference.translator import EXTRA_OUTPUT_TOKENS, Translator
from kformer.model import build_decoder_only, build_transformer
from kformer.model_dir import SOURCE_VOCAB_FILE, TARGET_VOCAB_FILE, ModelDirectoryError
from kformer.training.evaluation import BestTranslations, perplexity


class Translation:
    """Sentence pairs -> an encoder-decoder translator."""

    kind, noun, examples = "translator", "translator", "pairs"
    unexported = ()  # kformer.deploy.FORMATS it has no writer for
    tflite_text = True  # a TFLite model of strings in, strings out (tensorflow-text's kernels)

    def vocabularies(self, out, pairs, config, verbose, write=True):
        """The source and target tokenizers; with `shared_vocab`, one learned from both sides, written under both
        names. Learned from `pairs` (the first `config.vocab_sample`), or loaded from `out`, where an interrupted
        run left them; `write`: write those learned there."""
        pairs = pairs[: config.vocab_sample]
        sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
        if config.shared_vocab:
            wanted = {SOURCE_VOCAB_FILE: (sources + targets, config.target_vocab_size, "the training pairs")}
            (shared,) = learn_vocabularies(out, wanted, verbose, write).values()
            if write and not (out / TARGET_VOCAB_FILE).is_file():
                write_atomically(out / TARGET_VOCAB_FILE, shared.save)
            return shared, shared
        wanted = {
            SOURCE_VOCAB_FILE: (sources, config.source_vocab_size, "the source side"),
            TARGET_VOCAB_FILE: (targets, config.target_vocab_size, "the target side"),
        }
        return tuple(learn_vocabularies(out, wanted, verbose, write).values())

    def model(self, config, source, target):
        """(builder, its vocabulary sizes, the settings it is built with)."""
        return build_transformer, (source.vocab_size, target.vocab_size), config

    def validation(self, valid_pairs, source, target, batches, best_weights):
        """(the validation batches or None, the keeper of the best translations or None); `batches`:
        `make_dataset`'s batch_size, batch_tokens and max_length."""
        if not valid_pairs:
            return None, None
        valid = None
        if fits(*pair_lengths(valid_pairs, source, target), batches["max_length"]).any():  # else no val_loss
            valid = make_dataset(valid_pairs, source, target, shuffle=False, **batches)
        return valid, BestTranslations(valid_pairs, source, target, batches["max_length"], best_weights)

    def results(self, model, target, valid_pairs, config):
        """What the end of training adds to the run's summary, beyond the keeper's: nothing."""
        return {}

    def runner(self, trained, beam_size=1, length_penalty=None, max_new_tokens=None, xla=False):
        """The `Translator` an export serves (`max_new_tokens` is a language model's)."""
        return Translator(trained, beam_size=beam_size, xla=xla, **_given(length_penalty=length_penalty))

    def id_functions(self, runner):
        """{signature name: function of int32 ids -> {output: tensor}}, the export's signatures besides texts:
        `translate_ids` (the best translation, its log-probability) and `search_ids` (every hypothesis, best
        first: tokens `(B, N, T)`, log-probabilities and the ranking scores `(B, N)`)."""

        def search_ids(encoder_tokens):
            tokens, log_probs = runner.search_ids(encoder_tokens)
            scores = ranking_scores(tokens, log_probs, runner.length_penalty)
            return {"output_tokens": tokens, "log_probs": log_probs, "scores": scores}

        def translate_ids(encoder_tokens):
            return dict(zip(("output_tokens", "log_probs"), runner.best_ids(encoder_tokens), strict=True))

        return {runner.ids_name: translate_ids, "search_ids": search_ids}

    def manifest(self, runner):
        """The decoding settings an export's manifest records, which its clients follow."""
        return {
            "max_output_ratio": runner.max_output_ratio,
            "extra_output_tokens": EXTRA_OUTPUT_TOKENS,
            "length_penalty": runner.length_penalty,
        }


class LanguageModel:
    """Lines of text -> a decoder-only (GPT-style) language model; one vocabulary, no source side."""

    kind, noun, examples = "language_model", "language model", "lines"
    unexported = ("ctranslate2",)  # CTranslate2's decoder-only spec is not written here
    tflite_text = False

    def vocabularies(self, out, lines, config, verbose, write=True):
        """(None, the one tokenizer): a language model has no source side."""
        wanted = {TARGET_VOCAB_FILE: (lines[: config.vocab_sample], config.target_vocab_size, "the training text")}
        (target,) = learn_vocabularies(out, wanted, verbose, write).values()
        return None, target

    def model(self, config, source, target):
        # One vocabulary already: --shared-vocab's tying is the decoder's input and output tying.
        tie = config.tie_embeddings or config.shared_vocab
        settings = dataclasses.replace(config, shared_vocab=False, tie_embeddings=tie)
        return build_decoder_only, (target.vocab_size,), settings

    def validation(self, valid_pairs, source, target, batches, best_weights):
        return None, None  # scored once, at the end (`results`)

    def results(self, model, target, valid_lines, config):
        """The model's perplexity on the held-out lines (`evaluation.perplexity`), given some."""
        if not valid_lines:
            return {}
        return {"val_perplexity": round(perplexity(model, target, valid_lines, config.max_length), 2)}

    def runner(self, trained, beam_size=1, length_penalty=None, max_new_tokens=None, xla=False):
        """The `Generator` an export serves: greedy, `max_new_tokens` a prompt, in the plain graph loop."""
        given = {"--beam": beam_size != 1, "--length-penalty": length_penalty is not None, "--xla": xla}
        asked = [flag for flag, was_given in given.items() if was_given]
        if asked:
            raise ValueError(
                f"{' and '.join(asked)}: for translators only; a {self.noun} exports greedy generation in the graph "
                "loop (--max-tokens sets its length)."
            )
        return Generator(trained, **_given(max_new_tokens=max_new_tokens))

    def id_functions(self, runner):
        """{`generate_ids`: the continuation's ids}."""
        generate = getattr(runner, runner.ids_name)
        return {runner.ids_name: lambda prompt_tokens: {"output_tokens": generate(prompt_tokens)}}

    def manifest(self, runner):
        return {"max_new_tokens": runner.max_new_tokens}


TRANSLATION, LANGUAGE_MODEL = Translation(), LanguageModel()
TASKS = {task.kind: task for task in (TRANSLATION, LANGUAGE_MODEL)}


def task_of(trained):
    """The task of a `TrainedModel` (its config's "kind", which `load` has checked)."""
    return TASKS[trained.kind]


def require(trained, task, path, instead):
    """`trained` if it is a model of `task`, else a `ModelDirectoryError` naming `path`, what it holds, and
    `instead`: what to do."""
    if task_of(trained) is not task:
        raise ModelDirectoryError(f"{path}: holds a {task_of(trained).noun}, not a {task.noun}; {instead}.")
    return trained


def learn_vocabularies(out, wanted, verbose, write=True):
    """{file name: Tokenizer} for `wanted` {file name: (sentences, size, what they are)}: each loaded from `out`,
    or learned (all at once) and, with `write`, written there."""
    missing = {name: value for name, value in wanted.items() if not (out / name).is_file()}
    for sentences, size, what in missing.values():
        try:
            check_sentences(sentences)
        except ValueError as error:  # nothing but blank sentences
            raise DataError(f"{what} holds {error}") from None
        if verbose:
            print(f"Learning a {size}-token WordPiece vocabulary from {len(sentences):,} sentences ...", flush=True)
    learned = build_vocabularies([(sentences, size) for sentences, size, _ in missing.values()])
    tokenizers = dict(zip(missing, map(Tokenizer, learned), strict=True))
    for name, tokenizer in tokenizers.items():
        if write:
            write_atomically(out / name, tokenizer.save)
    return {name: tokenizers.get(name) or Tokenizer.load(out / name) for name in wanted}


def _given(**settings):
    """The settings that are not None: those left out take the runner's own defaults."""
    return {name: value for name, value in settings.items() if value is not None}
