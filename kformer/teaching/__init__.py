"""The course's own code: what the notebooks and `kformer walkthrough` use beyond the package.

- `mvp`: seed 003's eight stages as models, from averaging to N residual blocks.
- `walkthrough`: the seeds' worked examples recomputed by the layers.
- `plots`: attention heatmaps of a translation.

Importing it registers the stage models' Keras objects (`import kformer` does
not), so `keras.saving.load_model` reads a stage's `.keras` file after it.
"""

from kformer.teaching import mvp  # noqa: F401  (registers the stage models)
