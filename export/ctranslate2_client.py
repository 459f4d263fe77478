"""Translate with CTranslate2: ctranslate2/ of `kformer export`, no TensorFlow needed.

    python export/ctranslate2_client.py EXPORT_DIR "the black cat sleeps" ...
    python export/ctranslate2_client.py EXPORT_DIR --model ctranslate2_int8 --beam 4 "..."

CTranslate2 reads and writes tokens as strings: this client cuts text into the
export's WordPiece pieces (wordpiece.py), translates a sentence over the model's
max_length tokens in pieces and allows the same number of output tokens as
kformer's decoder (wordpiece.output_limit), as kformer's graph does, so greedy
decoding gives kformer's tokens. Beam search scores length differently (CTranslate2 divides by
length ** length_penalty; kformer uses GNMT's ((5 + length) / 6) ** 0.6), so
beam outputs can differ.
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

    def translate(self, sentences, beam_size=1):
        """Lines in, translations out; a line of several sentences is split as kformer's graph splits it."""

        def in_pieces(flat):
            return by_piece(lambda ids: self._translate(ids, beam_size), flat, self.source, self.target, self.manifest)

        return by_sentence(in_pieces, sentences, self.manifest)

    def _translate(self, pieces, beam_size):
        if not pieces:
            return []
        batch = [[self.source.vocabulary[i] for i in ids] for ids in pieces]
        results = self.translator.translate_batch(
            batch,
            beam_size=beam_size,
            max_decoding_length=output_limit(self.manifest, max(len(ids) for ids in pieces)),
        )
        return [[self.target.ids[t] for t in r.hypotheses[0]] for r in results]


def translate(export_dir, sentences, model="ctranslate2", beam_size=1):
    return Client(export_dir, model).translate(sentences, beam_size)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("export_dir")
    parser.add_argument("sentences", nargs="+")
    parser.add_argument("--model", default="ctranslate2", help="a CTranslate2 model folder in EXPORT_DIR")
    parser.add_argument("--beam", type=int, default=1)
    args = parser.parse_args()
    try:
        print("\n".join(translate(args.export_dir, args.sentences, args.model, args.beam)))
    except ExportFolderError as error:
        sys.exit(f"{parser.prog}: error: {error}")


if __name__ == "__main__":
    main()
