"""Translate with CTranslate2: ctranslate2/ of `kformer export`, no TensorFlow needed.

    python export/ctranslate2_client.py EXPORT_DIR "the black cat sleeps" ...
    python export/ctranslate2_client.py EXPORT_DIR --model ctranslate2_int8 --beam 4 "..."

CTranslate2 reads and writes tokens as strings: this client cuts text into the
export's WordPiece pieces (wordpiece.py), translates a sentence over the model's
max_length tokens in pieces and allows the same number of output tokens as
kformer's decoder (wordpiece.output_limit), as kformer's graph does, so greedy
decoding gives kformer's tokens. Beam search scores length differently (CTranslate2 divides by
length ** length_penalty; kformer uses GNMT's ((5 + length) / 6) ** alpha, 0.6 by default), so
beam outputs can differ. --length-penalty defaults to the export's alpha (its manifest's,
`kformer export --length-penalty`), applied CTranslate2's way; at 0 both rank by
log-probability alone.

    python export/ctranslate2_client.py EXPORT_DIR --beam 4 --n-best 4 --scores --length-penalty 0 "..."

With --n-best K each line is read as one sentence (as `kformer translate --n-best` does) and
gives K lines `index<TAB>score<TAB>translation`, best first (an empty line one empty translation),
the score CTranslate2's: the translation's log-probability ([END] included), over
length ** length_penalty in beam search.
"""

import argparse
import sys
from pathlib import Path

import ctranslate2

sys.path.insert(0, str(Path(__file__).resolve().parent))
from wordpiece import ExportFolderError, WordPiece, by_piece, by_sentence, output_limit, read_manifest  # noqa: E402


class Client:
    """A loaded CTranslate2 model with the export's vocabularies; `translate` is text in, text out."""

    def __init__(self, export_dir, model="ctranslate2", threads=0):
        export_dir = Path(export_dir)
        self.manifest = read_manifest(export_dir, f"{model}/model.bin")
        self.source = WordPiece(export_dir / "source_vocab.txt")
        self.target = WordPiece(export_dir / "target_vocab.txt")
        self.translator = ctranslate2.Translator(str(export_dir / model), device="cpu", intra_threads=threads)

    def translate(self, sentences, beam_size=1, length_penalty=None):
        """Lines in, translations out; a line of several sentences is split as kformer's graph splits it.
        `length_penalty`: as in `n_best`."""
        options = dict(beam_size=beam_size, length_penalty=self._alpha(length_penalty))

        def in_pieces(flat):
            return by_piece(lambda ids: self._translate(ids, options), flat, self.source, self.target, self.manifest)

        return by_sentence(in_pieces, sentences, self.manifest)

    def _alpha(self, given=None):
        """CTranslate2's alpha: `given`, else the export's (its manifest's), else kformer's default 0.6."""
        return self.manifest.get("length_penalty", 0.6) if given is None else given

    def _translate(self, pieces, options):
        if not pieces:
            return []
        return [[self.target.ids[t] for t in r.hypotheses[0]] for r in self._search(pieces, **options)]

    def _search(self, pieces, **options):
        """CTranslate2's results for source id lists, decoded as kformer decodes: its output limit, never
        [PAD] or [START], and an empty translation allowed (CTranslate2's minimum length is 1)."""
        pad, _, start, _ = self.manifest["reserved_tokens"]
        return self.translator.translate_batch(
            [[self.source.vocabulary[i] for i in ids] for ids in pieces],
            max_decoding_length=output_limit(self.manifest, max(len(ids) for ids in pieces)),
            suppress_sequences=[[pad], [start]],
            min_decoding_length=0,
            **options,
        )

    def n_best(self, sentences, beam_size, n_best, length_penalty=None):
        """Each sentence read as one -> its `n_best` translations, best first, as (text, score) pairs.

        `length_penalty`: CTranslate2's (None: the export's, from its manifest, which CTranslate2 applies
        as length ** alpha, not GNMT's; 0: log-probability alone, as kformer with length_penalty=0).
        """
        if not 1 <= n_best <= beam_size:
            raise ValueError(f"n_best must be between 1 and the beam size ({beam_size}), got n_best={n_best}.")
        alpha = self._alpha(length_penalty)
        ids = [self.source.tokenize(sentence) for sentence in sentences]
        too_long = [i for i, row in enumerate(ids) if len(row) > self.manifest["max_length"]]
        if too_long:
            raise ValueError(
                f"sentence {too_long[0] + 1} has {len(ids[too_long[0]])} pieces, more than the model's max_length "
                f"({self.manifest['max_length']}); --n-best reads a line as one sentence: split it first."
            )
        lists = [[("", 0.0)] for _ in sentences]  # an empty line gives one empty translation
        rows = [i for i, row in enumerate(ids) if row]
        if rows:
            options = dict(beam_size=beam_size, num_hypotheses=n_best, return_scores=True, length_penalty=alpha)
            results = self._search([ids[i] for i in rows], **options)
            for i, result in zip(rows, results, strict=True):
                texts = [self.target.detokenize([self.target.ids[t] for t in h]) for h in result.hypotheses]
                lists[i] = list(zip(texts, result.scores, strict=True))
        return lists


def translate(export_dir, sentences, model="ctranslate2", beam_size=1, length_penalty=None):
    return Client(export_dir, model).translate(sentences, beam_size, length_penalty)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("export_dir")
    parser.add_argument("sentences", nargs="+")
    parser.add_argument("--model", default="ctranslate2", help="a CTranslate2 model folder in EXPORT_DIR")
    parser.add_argument("--beam", type=int, default=1)
    parser.add_argument("--n-best", type=int, help="hypotheses a sentence, best first (<= --beam)")
    parser.add_argument("--scores", action="store_true", help="print each translation's score (with --n-best)")
    parser.add_argument("--length-penalty", type=float, help="CTranslate2's alpha (default: the export's)")
    args = parser.parse_args()
    try:
        if args.n_best is None and not args.scores:
            print("\n".join(translate(args.export_dir, args.sentences, args.model, args.beam, args.length_penalty)))
            return
        client = Client(args.export_dir, args.model)
        lists = client.n_best(args.sentences, args.beam, args.n_best or 1, args.length_penalty)
        for index, hypotheses in enumerate(lists):
            for text, score in hypotheses:
                print(f"{index}\t{score:.4f}\t{text}" if args.scores else f"{index}\t{text}")
    except (ExportFolderError, ValueError) as error:
        sys.exit(f"{parser.prog}: error: {error}")


if __name__ == "__main__":
    main()
