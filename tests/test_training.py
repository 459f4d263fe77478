"""The training recipe: loss, metric, schedule, time budget, and a model that learns."""

import json
import time

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import REPO, run_fresh_python, to_numpy

from kformer import MaskedAccuracy, MaskedSparseCrossEntropy, TransformerSchedule, build_transformer
from kformer.data.text import END_ID, START_ID
from kformer.inference.decoding import decode
from kformer.training.callbacks import TimeBudget
from kformer.training.objectives import BudgetSchedule, compile_for_training

rng = np.random.default_rng(11)


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_label_smoothing_equals_its_formula(smoothing):
    logits = rng.standard_normal((2, 5, 9)).astype("float32")
    labels = np.array([[4, 5, 6, 0, 0], [7, 8, 4, 5, 6]])
    loss = float(MaskedSparseCrossEntropy(smoothing)(labels, logits))

    # q = (1 - e) one_hot + e / V, cross-entropy averaged over the 8 real tokens.
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    q = (1 - smoothing) * np.eye(9)[labels] + smoothing / 9
    expected = -(q * log_probs).sum(-1)[labels != 0].mean()
    assert loss == pytest.approx(expected, rel=1e-5)

    # Keras's own dense-label smoothing agrees on the real tokens.
    real = labels != 0
    keras_loss = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=smoothing)(
        np.eye(9)[labels[real]], logits[real]
    )
    assert loss == pytest.approx(float(keras_loss), rel=1e-5)


def test_loss_and_accuracy_ignore_padding():
    logits = rng.standard_normal((1, 4, 6)).astype("float32")
    labels = np.array([[4, 5, 0, 0]])
    changed = logits.copy()
    changed[0, 2:] = rng.standard_normal((2, 6)) * 100
    loss = MaskedSparseCrossEntropy(0.1)
    assert float(loss(labels, logits)) == pytest.approx(float(loss(labels, changed)), rel=1e-6)
    accuracy = MaskedAccuracy()
    perfect = np.eye(6, dtype="float32")[[[4, 5, 1, 1]]] * 10
    accuracy.update_state(labels, perfect)
    assert float(accuracy.result()) == 1.0


def test_accuracy_is_the_share_of_real_tokens_whose_argmax_is_the_label():
    logits = rng.standard_normal((3, 7, 11)).astype("float32")
    labels = rng.integers(1, 11, size=(3, 7))
    labels[0, :4] = logits[0, :4].argmax(-1)  # some hits beside the random ones
    labels[1, 5:], labels[2, 2:] = 0, 0
    real = labels != 0
    accuracy = MaskedAccuracy()
    accuracy.update_state(labels, logits)
    assert float(accuracy.result()) == pytest.approx((logits.argmax(-1) == labels)[real].mean())


def test_schedule_is_the_papers():
    schedule = TransformerSchedule(d_model=512, warmup_steps=4000)
    for step in [1, 100, 3999, 4000, 4001, 100_000]:
        expected = 512**-0.5 * min(step**-0.5, step * 4000**-1.5)
        assert float(schedule(step - 1)) == pytest.approx(expected, rel=1e-5)  # iterations count from 0
    rates = [float(schedule(step)) for step in range(0, 10_000, 50)]
    assert np.argmax(rates) == 4000 // 50  # the update at step 4001, the nearest sampled to the peak


def budget_reference(step, d_model, warmup, total):
    """The budget schedule written out: the paper's peak after min(warmup, total / 10) steps, then a line to 0."""
    peak = d_model**-0.5 * warmup**-0.5
    warmup = min(warmup, total / 10)
    return peak * min(1.0, step / warmup) * max(0.0, 1.0 - step / total)


@pytest.mark.parametrize("total", [600, 7_000, 100_000])
def test_budget_schedule_warms_up_then_falls_to_zero_at_the_budget(total):
    schedule = BudgetSchedule(d_model=256, total_steps=total, warmup_steps=4000)
    steps = [1, 2, 59, 60, 61, 399, 400, 4000, total // 2, total - 1, total]
    for step in sorted({s for s in steps if s <= total}):
        expected = budget_reference(step, 256, 4000, total)
        assert float(schedule(step - 1)) == pytest.approx(expected, rel=1e-4, abs=1e-9)  # float32 near the end
    assert float(schedule(total - 1)) == 0.0  # the budget's last update
    top = max(float(schedule(step)) for step in range(0, total, max(total // 1000, 1)))
    warmup = min(4000, total / 10)
    paper_peak = float(TransformerSchedule(256, 4000)(3999))
    assert top == pytest.approx(paper_peak * (1 - warmup / total), rel=0.02)  # the paper's peak, then the line
    # A short budget does not spend itself warming up: 600 steps warm up for 60, not 4,000.
    if total == 600:
        assert float(schedule(59)) > 0.85 * top


def test_budget_schedule_survives_saving():
    schedule = BudgetSchedule(d_model=64, total_steps=1234, warmup_steps=100, scale=2.0)
    schedule.total_steps.assign(999.0)  # as TimeBudget leaves it
    again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    for step in (0, 50, 500, 998):
        assert float(again(step)) == pytest.approx(float(schedule(step)))


def test_a_wall_clock_budget_ends_with_the_learning_rate_near_zero():
    """TimeBudget measures the pace and moves the schedule's end to the budget's; noam is still high there."""
    keras.utils.set_random_seed(0)
    rates = {}
    for name in ("budget", "noam"):
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        if name == "budget":
            schedule = BudgetSchedule(64, total_steps=1e9, warmup_steps=20)
        else:
            schedule = TransformerSchedule(64, warmup_steps=20)
        model.compile(keras.optimizers.Adam(schedule), loss="mse")
        budget = TimeBudget(minutes=0.08, schedule=schedule)  # about 5 s
        x = np.zeros((100_000, 4), "float32")
        model.fit(x, x[:, :1], batch_size=1, epochs=1, callbacks=[budget], verbose=0)
        assert budget.expired
        rates[name] = float(schedule(model.optimizer.iterations - 1)) / float(schedule(19))  # last / peak
    assert rates["budget"] < 0.01
    assert rates["noam"] > 0.02  # sqrt(20 / steps): thousands of steps, not millions


def test_time_budget_stops_training():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(loss="mse")
    budget = TimeBudget(minutes=0.0)
    model.fit(np.zeros((64, 2)), np.zeros((64, 1)), batch_size=1, epochs=5, callbacks=[budget], verbose=0)
    assert budget.expired and budget.steps == 1


def test_the_budget_clock_starts_when_the_first_step_ends():
    """The first step waits for the data and the compiler; a budget shorter than that wait still trains."""

    class SlowFirstStep(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 0:
                time.sleep(1.0)

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(loss="mse")
    budget = TimeBudget(minutes=0.5 / 60)
    data = np.zeros((10_000, 2)), np.zeros((10_000, 1))
    model.fit(*data, batch_size=1, callbacks=[SlowFirstStep(), budget], verbose=0)
    assert budget.expired and budget.first_step_seconds >= 1.0
    assert budget.steps > 10 and 0.5 <= budget.elapsed < 1.0


def copy_task_batches(batch_size=32, length=5, vocab=12, steps=600, seed=0):
    """Random sequences of ids 4..vocab-1; the target is the source itself."""
    data_rng = np.random.default_rng(seed)
    source = data_rng.integers(4, vocab, size=(steps * batch_size, length)).astype("int32")
    start = np.full((len(source), 1), START_ID, "int32")
    end = np.full((len(source), 1), END_ID, "int32")
    return source, np.concatenate([start, source], 1), np.concatenate([source, end], 1)


@pytest.mark.slow  # 18 s: trains
def test_a_tiny_model_learns_to_copy():
    keras.utils.set_random_seed(0)
    source, decoder_tokens, labels = copy_task_batches()
    model = build_transformer(12, 12, d_model=32, num_heads=2, num_layers=1, d_ff=64, dropout=0.0)
    compile_for_training(model, 32, label_smoothing=0.0, warmup_steps=200)
    model.fit([source, decoder_tokens], labels, batch_size=32, epochs=1, verbose=0)
    test_source, _, _ = copy_task_batches(steps=4, seed=1)
    generated = to_numpy(decode(model, tf.constant(test_source), max_length=6))
    np.testing.assert_array_equal(generated[:, :5], test_source)
    assert (generated[:, 5] == END_ID).all()


def test_the_optimizer_is_adam_with_the_papers_betas_and_epsilon():
    """Adam(0.9, 0.98, 1e-9), as in the paper's section 5.3, against a NumPy transcription of its update.

    Gradients near 1e-8 make epsilon matter (1e-7, Keras' default, would shrink the steps tenfold)
    and changing ones make beta_2 matter.
    """
    from kformer.training.objectives import make_optimizer

    optimizer = make_optimizer(0.1)
    weight = keras.Variable(0.0)
    m = v = w = 0.0
    for t, g in enumerate([1e-8, 3e-8, -2e-8, 5e-9], start=1):
        optimizer.apply_gradients([(tf.constant(g, tf.float32), weight)])
        m, v = 0.9 * m + 0.1 * g, 0.98 * v + 0.02 * g * g
        # Keras' form: the step size carries the bias corrections, epsilon is the paper's "epsilon hat".
        w -= 0.1 * np.sqrt(1 - 0.98**t) / (1 - 0.9**t) * m / (np.sqrt(v) + 1e-9)
        assert float(weight.numpy()) == pytest.approx(w, rel=1e-4)


def test_the_optimizer_clips_and_averages_only_when_asked():
    from kformer.training.objectives import make_optimizer

    plain = make_optimizer(0.1).get_config()
    assert plain["clipnorm"] is None and plain["use_ema"] is False
    asked = make_optimizer(0.1, clipnorm=1.0, ema=0.999).get_config()
    assert (asked["clipnorm"], asked["use_ema"], asked["ema_momentum"]) == (1.0, True, 0.999)


def test_compiling_takes_the_papers_recipe_unless_told_otherwise():
    """Label smoothing 0.1, the paper's schedule over 4,000 warmup steps, token accuracy, XLA; what is
    given instead reaches the loss, the schedule and the optimizer."""
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4)])
    compile_for_training(model, 64)
    compiled = model.get_compile_config()
    assert compiled["jit_compile"] is True and model.loss.label_smoothing == 0.1
    assert [metric["class_name"] for metric in compiled["metrics"]] == ["MaskedAccuracy"]
    assert compiled["optimizer"]["config"]["learning_rate"]["config"] == {
        "d_model": 64,
        "warmup_steps": 4000,
        "scale": 1.0,
    }

    compile_for_training(model, 64, 0.2, 100, learning_rate_scale=2.0, clipnorm=1.0, jit_compile=False, ema=0.999)
    compiled = model.get_compile_config()
    optimizer = compiled["optimizer"]["config"]
    assert compiled["jit_compile"] is False and model.loss.label_smoothing == 0.2
    assert optimizer["learning_rate"]["config"] == {"d_model": 64, "warmup_steps": 100, "scale": 2.0}
    assert (optimizer["clipnorm"], optimizer["use_ema"], optimizer["ema_momentum"]) == (1.0, True, 0.999)


def test_the_loss_the_metric_and_the_schedule_come_back_from_their_configs():
    labels, logits = np.array([[5, 2, 0]]), rng.standard_normal((1, 3, 7)).astype("float32")
    loss = MaskedSparseCrossEntropy(label_smoothing=0.3, name="smoothed")
    again = MaskedSparseCrossEntropy.from_config(loss.get_config())
    assert (again.name, again.label_smoothing) == ("smoothed", 0.3)
    assert float(again(labels, logits)) == pytest.approx(float(loss(labels, logits)))
    schedule = TransformerSchedule(d_model=64, warmup_steps=30, scale=2.0)
    again = TransformerSchedule.from_config(schedule.get_config())
    assert [float(again(step)) for step in (0, 29, 500)] == [float(schedule(step)) for step in (0, 29, 500)]
    metric = MaskedAccuracy(name="token_accuracy", dtype="float64")
    again = MaskedAccuracy.from_config(metric.get_config())
    assert (again.name, again.dtype) == (metric.name, metric.dtype) == ("token_accuracy", "float64")
    assert MaskedAccuracy().name == "accuracy"  # the key of model.fit's logs and history.csv


def test_the_metric_starts_over_when_reset():
    """Keras resets metrics at each epoch: an epoch's accuracy is its own, not the run's so far."""
    metric = MaskedAccuracy()
    assert [variable.name for variable in metric.variables] == ["correct", "total"]
    labels, logits = np.array([[1, 2, 0]]), np.eye(4, dtype="float32")[[[1, 3, 0]]]  # one hit of two real tokens
    metric.update_state(labels, logits)
    assert float(metric.result()) == 0.5
    metric.reset_state()
    assert [float(variable.numpy()) for variable in metric.variables] == [0.0, 0.0]
    metric.update_state(labels, np.eye(4, dtype="float32")[[[1, 2, 0]]])
    assert float(metric.result()) == 1.0


def test_the_losss_defaults_and_its_refusal_of_a_smoothing_of_one():
    loss = MaskedSparseCrossEntropy()
    assert (loss.name, loss.label_smoothing) == ("masked_sparse_cross_entropy", 0.1)  # the paper's e_ls
    assert MaskedSparseCrossEntropy(dtype="float64").dtype == "float64"  # Keras' own arguments reach it
    with pytest.raises(ValueError, match=r"^label_smoothing must be in \[0, 1\), got label_smoothing=1.0\.$"):
        MaskedSparseCrossEntropy(label_smoothing=1.0)  # a uniform target: nothing left to learn


def test_the_accuracy_of_a_single_real_token():
    metric = MaskedAccuracy()
    metric.update_state(np.array([[3, 0, 0]]), np.eye(4, dtype="float32")[[[3, 1, 1]]])
    assert float(metric.result()) == 1.0


def test_the_loss_of_a_single_real_token_is_its_cross_entropy_and_of_none_is_zero():
    logits = rng.standard_normal((1, 3, 6)).astype("float32")
    log_probs = logits[0, 0] - np.log(np.exp(logits[0, 0]).sum())
    loss = MaskedSparseCrossEntropy(0.0)
    assert float(loss(np.array([[4, 0, 0]]), logits)) == pytest.approx(-log_probs[4], rel=1e-5)
    assert float(loss(np.array([[0, 0, 0]]), logits)) == 0.0  # an all-padding batch: no NaN


def test_under_mixed_precision_the_loss_is_float32_computed_from_float32_logits():
    """bfloat16 logits (what a mixed model's last layer would give if it were not float32) are cast up
    first: the loss is float32 and equals the float64 NumPy cross-entropy of the same rounded values.
    Keras' `Loss.__call__` converts its inputs to float32 too, so removing the loss's own cast alone
    leaves this passing (tried); the test holds the behaviour, whichever of the two gives it."""
    logits = tf.cast(rng.standard_normal((2, 5, 900)) * 4.0 + 20.0, tf.bfloat16)
    labels = rng.integers(1, 900, size=(2, 5))
    labels[1, 3:] = 0
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        loss = MaskedSparseCrossEntropy(0.0)(labels, logits)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert keras.backend.standardize_dtype(loss.dtype) == "float32"
    values = to_numpy(tf.cast(logits, tf.float32)).astype("float64")
    top = values.max(-1, keepdims=True)
    log_probs = values - top - np.log(np.exp(values - top).sum(-1, keepdims=True))
    expected = -np.take_along_axis(log_probs, labels[..., None], -1)[..., 0] * (labels != 0) / (labels != 0).sum()
    assert float(loss) == pytest.approx(expected.sum(), rel=1e-5)


def test_a_budget_under_ten_steps_warms_up_in_one():
    """A tenth of 5 steps is half a step: the warmup is floored at one, so it is over by the first update,
    which is already on the linear decay from the peak (the paper's, at its 4,000 warmup steps by default)."""
    schedule = BudgetSchedule(d_model=64, total_steps=5)
    peak = 64**-0.5 * 4000**-0.5
    rates = [float(schedule(step)) for step in range(5)]
    assert rates == pytest.approx([peak * (1 - step / 5) for step in range(1, 6)], rel=1e-5, abs=1e-12)


def test_under_two_replicas_each_replicas_loss_is_its_mean_halved(tmp_path):
    """Keras sums the replicas' losses: each must be its own mean over real tokens divided by the replica count."""
    code = """
        import json
        import numpy as np
        import tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        from kformer import MaskedSparseCrossEntropy

        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        labels, logits = np.array([[4, 5, 0], [6, 0, 0]]), np.load("logits.npy")
        rows = strategy.experimental_distribute_values_from_function(  # row i to replica i
            lambda context: (labels[[context.replica_id_in_sync_group]], logits[[context.replica_id_in_sync_group]])
        )
        losses = strategy.run(MaskedSparseCrossEntropy(0.0), args=rows)
        print(json.dumps([float(loss) for loss in strategy.experimental_local_results(losses)]))
    """
    logits = rng.standard_normal((2, 3, 7)).astype("float32")
    np.save(tmp_path / "logits.npy", logits)
    losses = json.loads(run_fresh_python(code, cwd=tmp_path).strip().splitlines()[-1])
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    means = [-(log_probs[0, 0, 4] + log_probs[0, 1, 5]) / 2, -log_probs[1, 0, 6]]
    assert losses == pytest.approx([mean / 2 for mean in means], rel=1e-5)
    whole = float(MaskedSparseCrossEntropy(0.0)(np.array([[4, 5, 0], [6, 0, 0]]), logits))  # one replica: the mean
    assert whole == pytest.approx(-(log_probs[0, 0, 4] + log_probs[0, 1, 5] + log_probs[1, 0, 6]) / 3, rel=1e-5)


@pytest.mark.slow  # 72 s: learns two vocabularies, trains 600 steps, compiles two translators
def test_the_readmes_model_fit_workflow_runs_as_written_and_learns(tmp_path, monkeypatch):
    """README, "Using it": public names only, `model.fit` with a Keras callback, then a model directory that
    `kformer.load` reads back and a `Translator` of it that translates as the one the snippet made."""
    import re

    import kformer

    blocks = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(encoding="utf-8"), re.DOTALL)
    (snippet,) = [block for block in blocks if "model.fit(" in block]
    monkeypatch.chdir(tmp_path)
    namespace = {}
    exec(snippet, namespace)
    history = namespace["model"].history.history
    assert history["val_loss"][-1] < history["val_loss"][0]
    sources = [s for s, _ in namespace["splits"]["test"][:32]]
    made, loaded = kformer.Translator(namespace["trained"]), kformer.Translator(kformer.load(tmp_path / "my-model"))
    assert made.translate(sources) == loaded.translate(sources)
    assert kformer.score(made.translate(sources), [t for _, t in namespace["splits"]["test"][:32]])["chrf"] > 40
