"""Text <-> token ids with tensorflow-text's FastWordpiece, inside the graph.

Choices, so output reads as text:
- Unicode is normalised to NFC (composed accents: "é" is one character).
- Case is kept: "Tom" and "tom" are different tokens, and translations come
  out properly cased. Accents are kept too (Spanish needs them).
- Words and punctuation are split BERT-style, then each word is cut into
  WordPiece pieces learned from the training data ("##" marks a piece that
  continues a word). Detokenizing rejoins the pieces and then closes the gaps
  that the split opened around punctuation ("casa ." -> "casa.",
  "¿ quién" -> "¿quién", "don ' t" -> "don't").
- Ids 0-3 are reserved: [PAD], [UNK], [START], [END].
"""

import collections
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset
from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner

PAD, UNK, START, END = "[PAD]", "[UNK]", "[START]", "[END]"
RESERVED_TOKENS = [PAD, UNK, START, END]
PAD_ID, UNK_ID, START_ID, END_ID = range(4)

# (pattern, replacement) pairs in RE2 syntax, applied in order to the space-joined
# pieces. `kformer export` writes them into its manifest, from which the plain-Python
# clients (export/wordpiece.py) read them: they are defined here only.
SPACING_RULES = [
    (r"(\pN) ([:.,]) (\pN)", r"\1\2\3"),  # 2:30, 70,000, 3.5
    (r" ([.,!?;:%)\]}»…])", r"\1"),  # no space before closing punctuation
    (r"([¿¡(\[{«$]) ", r"\1"),  # nor after opening punctuation or a dollar sign
    (r"(\pL) (['’]) (s|t|re|ve|ll|d|m|clock)\b", r"\1\2\3"),  # don't, Tom's, you’ll, o'clock
    (r"(\pL|\pN) - (\pL|\pN)", r"\1-\2"),  # well-known, 9-5
    (r'" ([^"]*?) "', r'"\1"'),  # "quoted"
]


def normalize(texts):
    """NFC-normalises a string tensor (any shape)."""
    return tf_text.normalize_utf8(texts, "NFC")


def check_sentences(sentences):
    """`sentences` as a list of strings with a word among them, or ValueError saying what is wrong."""
    sentences = [text.decode("utf-8") for text in utf8_batch(sentences)]  # a list of strings, or TypeError
    if not sentences:
        raise ValueError("no sentences to learn a vocabulary from.")
    if not any(text.strip() for text in sentences):
        raise ValueError(f"no words to learn a vocabulary from: {len(sentences):,} sentences, all empty or blank.")
    return sentences


def build_vocabulary(sentences, vocab_size, batch_size=1024):
    """Learns a WordPiece vocabulary (reserved tokens first) from sentences.

    The vocabulary is tensorflow-text's `bert_vocab_from_dataset(sentences,
    vocab_size, RESERVED_TOKENS, dict(lower_case=False))`, token for token,
    learned with fewer passes over the words (see `learn_wordpiece`).

    Args:
        sentences: an iterable of Python strings.
        vocab_size: the most tokens to keep; small corpora give fewer.

    Returns:
        A list of token strings; index = token id.

    Raises:
        ValueError: there is not one word among the sentences.
    """
    sentences = tf.data.Dataset.from_tensor_slices(check_sentences(sentences)).batch(batch_size).map(normalize)
    words = bert_vocab_from_dataset.bert_tokenizer.BasicTokenizer(lower_case=False)  # the learner's own word split
    return learn_wordpiece(learner.count_words(sentences.map(words.tokenize)), vocab_size)


def learn_wordpiece(word_counts, vocab_size):
    """tensorflow-text's `wordpiece_tokenizer_learner_lib.learn(word_counts, vocab_size, RESERVED_TOKENS)`, faster.

    The learner binary-searches a count threshold between 10 and the count of
    the commonest word: each probe learns a whole vocabulary at one threshold
    (four passes over every word) until one comes within 5% below
    `vocab_size`. The first probes are far too high. A vocabulary at
    threshold t holds at most the reserved tokens, each character alone and
    after "##", and the pieces that occur at least t times as substrings (a
    piece's count in any pass is at most that), so a probe whose bound falls
    short of the 5% is answered "too few" without learning, as the learner
    would have answered it. The search takes the learner's path and returns
    its result, with half to nine tenths of the probes skipped on Tatoeba-like
    text (`python bench/wordpiece.py`, 8,000 tokens: 2-9x faster).
    """
    # The learner's defaults, named.
    params = learner.Params(
        upper_thresh=int(1e7), lower_thresh=10, num_iterations=4, max_input_tokens=int(5e6), max_token_length=50,
        max_unique_chars=1000, vocab_size=vocab_size, slack_ratio=0.05, include_joiner_token=True, joiner="##",
        reserved_tokens=RESERVED_TOKENS,
    )  # fmt: skip
    upper, lower = learner.get_search_threshs(list(word_counts.items()), params.upper_thresh, params.lower_thresh)
    words = learner.get_input_words(word_counts.items(), RESERVED_TOKENS, params.max_token_length)
    allowed = learner.get_allowed_chars(words, params.max_unique_chars)
    words = learner.filter_input_words(words, allowed, params.max_input_tokens)
    substrings = collections.Counter()
    for word, count in words:
        for start in range(len(word)):
            for end in range(start + 1, len(word) + 1):
                substrings[("##" if start else "") + word[start:end]] += count
    by_count = np.sort(np.fromiter(substrings.values(), np.int64, len(substrings)))
    del substrings  # millions of keys on a large sample: not held while the learner learns
    bound_above = len(RESERVED_TOKENS) + 2 * len(learner.extract_char_tokens(words))
    slack = params.slack_ratio * vocab_size
    while True:  # learner.learn_binary_search, as a loop
        thresh = (upper + lower) // 2
        most = bound_above + len(by_count) - int(np.searchsorted(by_count, thresh))
        last = lower >= upper or thresh <= 1
        if vocab_size - most > slack and not last:
            upper = thresh - 1  # too few, certainly: the learner would learn them and search below
            continue
        vocabulary = learner.learn_with_thresh(words, thresh, params)
        if (len(vocabulary) <= vocab_size and vocab_size - len(vocabulary) <= slack) or last:
            return vocabulary
        lower, upper = (thresh + 1, upper) if len(vocabulary) > vocab_size else (lower, thresh - 1)


# A process that learns one vocabulary: (sentences, size) pickled in, the vocabulary pickled out.
_LEARNER = """
import pickle, sys
sentences, size = pickle.load(sys.stdin.buffer)
from kformer.data.text import build_vocabulary
pickle.dump(build_vocabulary(sentences, size), sys.stdout.buffer)
"""


# A vocabulary (not the one of the most words) is learned in a process of its own when its sentences hold this many
# distinct words; below, in this process: a process starts by importing TensorFlow, which costs more than it saves
# on small corpora (`python bench/vocab.py`, bench/RESULTS.md, "The first step, 2026-12-03 evening").
SIDE_BY_SIDE_FROM = 12_000


def build_vocabularies(corpora, side_by_side_from=SIDE_BY_SIDE_FROM):
    """[build_vocabulary(sentences, size) for sentences, size in corpora], the large ones learned at the same time.

    tensorflow-text's WordPiece learner is pure Python, so threads would take
    turns: the vocabulary of the most distinct (space-separated) words, the
    slowest to learn, is learned in this process; every other one whose
    sentences hold at least `side_by_side_from` distinct words in a Python
    process of its own (a fresh one, which imports kformer again, so it
    starts seconds late: it gets the smaller job), the rest in this one.
    Two large vocabularies on two cores take about the time of the larger one
    and a TensorFlow import, not the time of both.

    Raises:
        ValueError: a list without a word (checked before any learning starts).
    """
    corpora = [(check_sentences(sentences), size) for sentences, size in corpora]
    words = [len({word for text in sentences for word in text.split()}) for sentences, _ in corpora]
    here = words.index(max(words)) if words else None  # no corpora given (a resumed run has its vocabularies)
    env = {
        **os.environ,
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")]),
    }
    processes = {}  # {index in corpora: the process learning it}
    try:
        for index, corpus in enumerate(corpora):
            if index == here or words[index] < side_by_side_from:
                continue
            pipes = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            processes[index] = subprocess.Popen([sys.executable, "-c", _LEARNER], env=env, **pipes)
            processes[index].stdin.write(pickle.dumps(corpus))  # read at once: the learner imports TensorFlow after
            processes[index].stdin.flush()
        vocabularies = [None if index in processes else build_vocabulary(*c) for index, c in enumerate(corpora)]
        for index, process in processes.items():
            result, errors = process.communicate()
            if process.returncode != 0:
                raise RuntimeError(f"the process learning a vocabulary failed: {errors.decode()[-2000:]}")
            vocabularies[index] = pickle.loads(result)
        return vocabularies
    finally:
        for process in processes.values():
            process.kill()
            process.wait()


class Tokenizer(tf.Module):
    """Strings to int32 WordPiece ids and back, usable inside a tf.function.

    Args:
        vocabulary: list of token strings, the reserved tokens first.

    Example:
    >>> tokenizer = Tokenizer(["[PAD]", "[UNK]", "[START]", "[END]", "el", "gato", "."])
    >>> tokenizer.detokenize(tokenizer.tokenize(["el gato."]))
    <tf.Tensor: shape=(1,), dtype=string, numpy=array([b'el gato.'], dtype=object)>
    """

    def __init__(self, vocabulary, name=None):
        super().__init__(name=name)
        vocabulary = list(vocabulary)
        if vocabulary[: len(RESERVED_TOKENS)] != RESERVED_TOKENS:
            raise ValueError(
                f"a vocabulary must start with {RESERVED_TOKENS}, got {vocabulary[: len(RESERVED_TOKENS)]}."
            )
        self.vocabulary = vocabulary
        self._wordpiece = tf_text.FastWordpieceTokenizer(
            vocabulary,
            suffix_indicator="##",
            unknown_token=UNK,
            token_out_type=tf.int32,
            no_pretokenization=False,
            support_detokenization=True,
        )

    @property
    def vocab_size(self):
        return len(self.vocabulary)

    def tokenize(self, texts, normalize_text=True):
        """tf.string `(B,)` -> ragged int32 `(B, None)`, no [START]/[END].

        Args:
            normalize_text: NFC-normalise first. False skips it (the TFLite
                string model, whose runtime has no normalisation op; its
                client normalises instead).
        """
        return self._wordpiece.tokenize(normalize(texts) if normalize_text else texts)

    def detokenize(self, token_ids, spacing=True):
        """int32 `(B, T)` (dense or ragged) -> readable tf.string `(B,)`.

        Reserved ids ([PAD], [START], [END]) are dropped; [UNK] is shown.

        Args:
            spacing: apply `SPACING_RULES`. False returns the pieces joined
                by spaces with regex-free ops only (what TFLite can run); a
                client applies the rules afterwards.
        """
        if isinstance(token_ids, tf.RaggedTensor):
            token_ids = token_ids.to_tensor(default_value=PAD_ID)
        keep = tf.logical_or(token_ids >= len(RESERVED_TOKENS), tf.equal(token_ids, UNK_ID))  # (B, T)
        pieces = tf.RaggedTensor.from_row_lengths(
            tf.boolean_mask(token_ids, keep), tf.reduce_sum(tf.cast(keep, tf.int64), axis=1), validate=False
        )
        text = self._wordpiece.detokenize(pieces)
        if spacing:
            for pattern, replacement in SPACING_RULES:
                text = tf.strings.regex_replace(text, pattern, replacement)
        return text

    def save(self, path):
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(self.vocabulary) + "\n")

    @classmethod
    def load(cls, path):
        with open(path, encoding="utf-8") as f:
            return cls(f.read().splitlines())


def utf8_batch(texts):
    """A list of Python strings -> their UTF-8 bytes, what a tf.string batch is made of.

    Characters UTF-8 cannot encode (lone surrogates, as from a file read
    with errors="surrogateescape") become "?".

    Raises:
        TypeError: `texts` is one string rather than a list of them, or holds something else.
    """
    if isinstance(texts, (str, bytes)):
        raise TypeError(f"give a list of strings, not one string: wrap it as [{texts!r:.40}].")
    batch = []
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts must be strings; item {index} is a {type(text).__name__}: {text!r:.50}.")
        batch.append(text.encode("utf-8", errors="replace"))
    return batch
