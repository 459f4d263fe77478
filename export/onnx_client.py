"""Translate with ONNX Runtime: onnx/translate_ids.onnx of `kformer export`, no TensorFlow needed.

    python export/onnx_client.py EXPORT_DIR "the black cat sleeps" ...

ONNX has no string ops, so tokenization runs in plain Python (wordpiece.py) with
the export's vocabulary files; the decoding loop runs inside the ONNX graph.
"""

import argparse
import sys
from pathlib import Path

import numpy as np
import onnxruntime

sys.path.insert(0, str(Path(__file__).resolve().parent))
from wordpiece import ExportFolderError, WordPiece, by_piece, by_sentence, pad_batch, read_manifest  # noqa: E402


def translate(export_dir, sentences):
    if not sentences:
        return []
    export_dir = Path(export_dir)
    manifest = read_manifest(export_dir, "onnx/translate_ids.onnx")
    source = WordPiece(export_dir / "source_vocab.txt")
    target = WordPiece(export_dir / "target_vocab.txt")
    session = onnxruntime.InferenceSession(str(export_dir / "onnx" / "translate_ids.onnx"))

    def translate_pieces(pieces):
        ids = np.array(pad_batch(pieces), dtype=np.int32)
        return session.run(["output_tokens"], {session.get_inputs()[0].name: ids})[0]  # log_probs is the other

    return by_sentence(lambda flat: by_piece(translate_pieces, flat, source, target, manifest), sentences, manifest)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("export_dir")
    parser.add_argument("sentences", nargs="+")
    args = parser.parse_args()
    try:
        print("\n".join(translate(args.export_dir, args.sentences)))
    except ExportFolderError as error:
        sys.exit(f"{parser.prog}: error: {error}")


if __name__ == "__main__":
    main()
