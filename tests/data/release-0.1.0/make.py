"""Writes model files with the release before the package layout changed (run with that release on the path)."""

import json
import sys
from pathlib import Path

import keras
from kformer.corpus import builtin_splits
from kformer.recipes import TrainingConfig, train_language_model, train_translator

import kformer

out = Path(sys.argv[1])
splits = builtin_splits(train_size=4000, valid_size=16, test_size=16)
small = dict(
    d_model=32,
    num_heads=4,
    num_layers=1,
    d_ff=64,
    source_vocab_size=200,
    target_vocab_size=200,
    epochs=4,
    steps_per_epoch=100,
    jit_compile=False,
    backup_steps=1000,
)
translator = train_translator(splits, out / "translator", TrainingConfig(**small, shared_vocab=True), verbose=0)
lm = train_language_model([t for _, t in splits["train"]], out / "language_model", TrainingConfig(**small), verbose=0)
sentences = [s for s, _ in splits["test"]]
golden = {
    "sentences": sentences,
    "greedy": kformer.Translator(translator).translate(sentences),
    "beam4": kformer.Translator(translator, beam_size=4).translate(sentences),
    "lm": kformer.Generator(lm, max_new_tokens=8).generate(["el gato", "la"]),
}
# A plain functional model of kformer layers, saved as one .keras file (what a Keras user keeps).
tokens = keras.Input((None,), dtype="int32")
x = kformer.PositionalEmbedding(vocab_size=50, d_model=8)(tokens)
x = kformer.TransformerBlock(d_model=8, num_heads=2, d_ff=16)(x)
model = keras.Model(tokens, x)
model.save(out / "layers.keras")
golden["layers_output"] = model.predict(keras.ops.convert_to_tensor([[3, 4, 5, 0]]), verbose=0).tolist()
(out / "golden.json").write_text(json.dumps(golden, ensure_ascii=False, indent=1))
