"""Training: from sentence pairs to a model directory.

- `config`: `TrainingConfig` and its checks (light: the CLI builds its flags from it).
- `objectives`: the masked label-smoothed loss, token accuracy, the schedules, Adam.
- `callbacks`: the time budget, checkpoint averaging, the resumable backup.
- `distribute`: strategies by name and the multi-worker loop.
- `evaluation`: sacreBLEU scores and the keeper of the best translations.
- `history`: the run's history re-read across restarts, and its learning curves.
- `tasks`: `TRANSLATION` and `LANGUAGE_MODEL`, all that differs between the two jobs and their exports.
- `jobs`: `train_translator` and `train_language_model`, end to end.
"""
