"""Translate on a device with LiteRT: the .tflite files of `kformer export`, no TensorFlow needed.

    python export/tflite_client.py EXPORT_DIR "the black cat sleeps" ...
    python export/tflite_client.py EXPORT_DIR --model translate_ids_int8.tflite "..."
    python export/tflite_client.py EXPORT_DIR --strings "..."   # translate.tflite, tokenization in the model

The default runs translate_ids.tflite (builtin ops only) with tokenization in
plain Python (wordpiece.py, the export's vocabulary files). --strings runs the
string-to-string model, whose tokenizer ops come from tensorflow-text's TFLite
kernels, and applies the spacing rules to its output.
"""

import argparse
import sys
import unicodedata
from pathlib import Path

import numpy as np
from ai_edge_litert.interpreter import Interpreter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from wordpiece import ExportFolderError, WordPiece, by_piece, by_sentence, pad_batch, read_manifest  # noqa: E402


def run_signature(interpreter, output, **inputs):
    """The output named `output` of the model's one signature."""
    return interpreter.get_signature_runner()(**inputs)[output]


def translate_ids(export_dir, sentences, model="translate_ids.tflite"):
    if not sentences:
        return []
    export_dir = Path(export_dir)
    manifest = read_manifest(export_dir, f"tflite/{model}")
    source = WordPiece(export_dir / "source_vocab.txt")
    target = WordPiece(export_dir / "target_vocab.txt")
    interpreter = Interpreter(model_path=str(export_dir / "tflite" / model))

    def translate_pieces(pieces):
        return run_signature(interpreter, "output_tokens", encoder_tokens=np.array(pad_batch(pieces), dtype=np.int32))

    return by_sentence(lambda flat: by_piece(translate_pieces, flat, source, target, manifest), sentences, manifest)


def translate_strings(export_dir, sentences):
    import tensorflow_text  # provides the tokenizer kernels (tensorflow_text.tflite_registrar)
    from ai_edge_litert.interpreter import InterpreterWithCustomOps

    manifest = read_manifest(export_dir, "tflite/translate.tflite")
    interpreter = InterpreterWithCustomOps(
        custom_op_registerers=tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS,
        model_path=str(Path(export_dir) / "tflite" / "translate.tflite"),
    )
    target = WordPiece(Path(export_dir) / "target_vocab.txt")  # for the spacing rules

    def translate_sentences(sentences):
        output = run_signature(interpreter, "translations", texts=np.array(sentences, dtype=object))
        return [target.space(text.decode("utf-8")) for text in output]

    sentences = [unicodedata.normalize("NFC", s) for s in sentences]  # the graph does not normalise
    return by_sentence(translate_sentences, sentences, manifest)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("export_dir")
    parser.add_argument("sentences", nargs="+")
    parser.add_argument("--model", default="translate_ids.tflite", help="a token-id model in EXPORT_DIR/tflite")
    parser.add_argument("--strings", action="store_true", help="run translate.tflite (strings in and out)")
    args = parser.parse_args()
    try:
        if args.strings:
            translations = translate_strings(args.export_dir, args.sentences)
        else:
            translations = translate_ids(args.export_dir, args.sentences, args.model)
    except ExportFolderError as error:
        sys.exit(f"{parser.prog}: error: {error}")
    print("\n".join(translations))


if __name__ == "__main__":
    main()
