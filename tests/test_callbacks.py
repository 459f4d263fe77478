"""The callbacks around model.fit, one at a time, in-process and on a clock the test sets.

`TimeBudget`'s progress line and its estimate of the schedule's end, `CheckpointAverage`'s choice of
checkpoints, the TensorBoard epoch summaries and `Backup`'s files and messages, each against numbers worked
out here by hand. The end-to-end runs (a kill, a resume, a budget) are in test_resilience.py and test_cli.py.
"""

import json
import math
import signal

import keras
import numpy as np
import pytest
from conftest import tensorboard_epoch_scalars

from kformer.training import callbacks
from kformer.training.callbacks import (
    Backup,
    CheckpointAverage,
    DamagedBackup,
    TensorBoard,
    TimeBudget,
    TrainingDiverged,
    TrainingInterrupted,
)
from kformer.training.objectives import BudgetSchedule


def small_model(learning_rate=0.1):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(keras.optimizers.SGD(learning_rate), "mse")
    return model


class Clock:
    """time.perf_counter, as the test sets it."""

    def __init__(self, now=100.0):
        self.now = now

    def __call__(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(callbacks.time, "perf_counter", clock)
    return clock


def run_steps(budget, model, clock, ends, logs=None):
    """Calls `budget` as fit would: train begin at the clock's time, then a step ending at each time in `ends`."""
    budget.set_model(model)
    budget.on_train_begin()
    for batch, now in enumerate(ends):
        clock.now = now
        model.optimizer.iterations.assign_add(1)
        budget.on_train_batch_end(batch, logs)


def test_the_budgets_line_every_twentieth_of_the_budget_and_at_each_epochs_end(clock, capsys):
    model = small_model()
    budget = TimeBudget(minutes=1.0, verbose=2)  # a line every 3 s of the 60
    assert budget.expired is False  # not before a step has run
    # The first step ends at 101 (the clock starts there); then 1.5, 3, 4, 5.9, 6 and 8.5 s into the budget.
    run_steps(budget, model, clock, [101.0, 102.5, 104.0, 105.0, 106.9, 107.0, 109.5], {"loss": 0.123456})
    assert budget.first_step_seconds == 1.0  # train begin at 100
    budget.on_epoch_end(0, {"loss": 0.5, "val_chrf": 41.25})
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        # 3 s gone: 57 s left, round(24 * 3 / 60) = 1 of the 24 marks
        "0:57 left ━" + "─" * 23 + " step 3  loss 0.1235",
        # 6 s: 54 left, round(2.4) = 2 marks (not at 5.9 s: 2.9 s after the last line)
        "0:54 left ━━" + "─" * 22 + " step 6  loss 0.1235",
        # the epoch's end, whenever it falls: 8.5 s, 51.5 left, round(3.4) = 3 marks
        "0:51 left ━━━" + "─" * 21 + " step 7  loss 0.5  val_chrf 41.25  (epoch 1 done)",
    ]


def test_on_a_terminal_the_budgets_line_is_redrawn_every_half_second_and_kept_at_each_epochs_end(clock, capsys):
    model = small_model()
    clock.now, budget = 49.0, TimeBudget(minutes=2.0, verbose=1)
    run_steps(budget, model, clock, [50.0, 50.2, 50.6, 50.7], {"loss": 2.0})  # 0, 0.2, 0.6, 0.7 s in
    budget.on_epoch_end(4, {"loss": 1.0})
    bar = "─" * 24  # round(24 * 0.7 / 120) = 0
    assert capsys.readouterr().out == (
        f"\r2:00 left {bar} step 1  loss 2\x1b[K"  # 0 s in: more than half a second after "never"
        f"\r1:59 left {bar} step 3  loss 2\x1b[K"  # 0.6 s in
        f"\r1:59 left {bar} step 4  loss 1  (epoch 5 done)\x1b[K\n"
    )


def test_a_quiet_budget_prints_nothing_and_a_spent_one_shows_a_full_bar(clock, capsys):
    model = small_model()
    run_steps(TimeBudget(minutes=1.0), model, clock, [1.0, 30.0, 70.0])
    assert capsys.readouterr().out == ""
    assert model.stop_training  # 69 s of 60
    model, budget = small_model(), TimeBudget(minutes=0.5, verbose=2)
    run_steps(budget, model, clock, [1.0, 40.0])
    assert budget.expired and model.stop_training
    assert capsys.readouterr().out == "0:00 left " + "━" * 24 + " step 2  \n"
    run_steps(TimeBudget(minutes=0, verbose=2), small_model(), clock, [1.0])  # no time at all: a full bar
    assert capsys.readouterr().out == "0:00 left " + "━" * 24 + " step 1  \n"


def test_under_several_workers_the_budget_goes_by_their_shared_clock(clock):
    model = small_model()
    budget = TimeBudget(minutes=1.0)
    budget.shared_seconds = 61.0  # the workers' mean, set by fit_across_workers before each step's end
    run_steps(budget, model, clock, [101.0])  # this worker's own clock: 0 s
    assert budget.expired and budget.elapsed == 61.0


def test_the_budget_moves_the_schedules_end_to_where_the_time_runs_out_at_the_pace_of_its_last_steps(clock):
    model = small_model()
    schedule = BudgetSchedule(64, total_steps=1000, warmup_steps=4)  # 1,000: what the epoch count allows
    budget = TimeBudget(minutes=1.0, schedule=schedule, window=10)
    run_steps(budget, model, clock, [5.0 + step for step in range(9)])  # 9 steps of a second: not yet
    assert float(schedule.total_steps.numpy()) == 1000.0
    clock.now = 14.0
    model.optimizer.iterations.assign_add(1)
    budget.on_train_batch_end(9, None)  # 10 steps, 9 s apart at 1 s each: 51 s left are 51 steps
    assert float(schedule.total_steps.numpy()) == 10 + 51 + 1
    for step in range(11, 21):  # then 2 s a step: the window of 10 forgets the first pace
        clock.now = 14.0 + 2 * (step - 10)
        model.optimizer.iterations.assign_add(1)
        budget.on_train_batch_end(step - 1, None)
    assert budget.elapsed == 29.0  # 31 s left are 15.5 steps
    assert float(schedule.total_steps.numpy()) == 20 + 15.5 + 1
    # Never past the epochs' end.
    long = BudgetSchedule(64, total_steps=30, warmup_steps=4)
    run_steps(TimeBudget(minutes=10.0, schedule=long), small_model(), clock, [float(t) for t in range(12)])
    assert float(long.total_steps.numpy()) == 30.0


def test_a_resumed_budget_ends_the_schedule_at_the_pace_of_the_run_before_the_restart(clock):
    model = small_model()
    model.optimizer.iterations.assign(50)
    schedule = BudgetSchedule(64, total_steps=1e9, warmup_steps=4)
    budget = TimeBudget(minutes=1.0, spent_seconds=25.0, schedule=schedule)
    budget.set_model(model)
    budget.on_train_begin()  # 50 steps in 25 s: 35 s left are 70 steps
    assert float(schedule.total_steps.numpy()) == 50 + 70 + 1
    clock.now = 200.0
    budget.on_train_batch_end(0, None)  # the clock goes on from the 25 s spent
    assert budget.elapsed == 25.0 and budget.steps == 1
    clock.now = 210.0
    budget.on_train_batch_end(1, None)
    assert budget.elapsed == 35.0
    unscheduled = TimeBudget(minutes=1.0, spent_seconds=25.0)  # resumed without a budget schedule: nothing to end
    unscheduled.set_model(model)
    unscheduled.on_train_begin()


def test_the_pace_is_that_of_the_last_200_steps_by_default(clock):
    """100 steps of 2 s, then 200 of 1 s: the default window sees only the 1-second ones."""
    model = small_model()
    schedule = BudgetSchedule(64, total_steps=1e6, warmup_steps=4)
    budget = TimeBudget(minutes=10.0, schedule=schedule)
    run_steps(budget, model, clock, [2.0 * step for step in range(101)] + [200.0 + step for step in range(1, 200)])
    assert budget.elapsed == 399.0  # 300 steps: 201 s left at a second a step
    assert float(schedule.total_steps.numpy()) == 300 + 201 + 1


def test_a_budget_ignores_a_schedule_that_is_not_the_budgets():
    schedule = keras.optimizers.schedules.ExponentialDecay(1.0, 10, 0.5)
    assert TimeBudget(minutes=1.0, schedule=schedule).schedule is None


def fit_recording(model, steps, every, k, keeper=None):
    """Fits `steps` batches with a `CheckpointAverage(k, every)`; {step: weights after it}, recorded apart."""
    seen = {}
    record = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: seen.update(
            {int(model.optimizer.iterations.numpy()): model.get_weights()}
        )
    )
    average = CheckpointAverage(k, every, keeper)
    x = np.random.default_rng(0).standard_normal((4 * steps, 3)).astype("float32")
    model.fit(x, x[:, :2] * 3.0, batch_size=4, epochs=1, verbose=0, callbacks=[record, average])
    return seen, average


def assert_weights(got, expected):
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize("k, steps, averaged", [(3, 20, (12, 16, 20)), (2, 12, (8, 12)), (4, 6, (4, 6))])
def test_the_average_is_of_the_last_k_checkpoints_the_last_step_counted_once(k, steps, averaged):
    """Checkpoints every 4 steps and at the end: 20 steps with k 3 average steps 12, 16 and 20 (not 20 twice, not
    4 and 8); 6 steps with k 4 have only two to average."""
    keras.utils.set_random_seed(0)
    model = small_model()
    seen, average = fit_recording(model, steps, 4, k)
    assert [step for step, _ in average.checkpoints] == list(averaged)
    assert_weights(model.get_weights(), [np.mean([seen[s][i] for s in averaged], axis=0) for i in range(2)])
    assert average.chrf is None


def test_one_checkpoint_is_not_averaged():
    keras.utils.set_random_seed(0)
    model = small_model()
    seen, _ = fit_recording(model, 3, 4, 2)
    assert_weights(model.get_weights(), seen[3])


class Keeper:
    """`BestTranslations`' consider(weights) -> chrF, recording what it was asked to judge."""

    def __init__(self):
        self.judged = []

    def consider(self, weights):
        self.judged.append(weights)
        return 42.5


def test_with_a_keeper_the_average_is_judged_not_put_into_the_model():
    keras.utils.set_random_seed(0)
    model = small_model()
    keeper = Keeper()
    seen, average = fit_recording(model, 8, 4, 2, keeper)
    assert average.chrf == 42.5 and len(keeper.judged) == 1
    assert_weights(keeper.judged[0], [np.mean([seen[s][i] for s in (4, 8)], axis=0) for i in range(2)])
    assert_weights(model.get_weights(), seen[8])  # the keeper decides what the model ends with
    keeper = Keeper()
    fit_recording(small_model(), 3, 4, 2, keeper)
    assert keeper.judged == []  # one checkpoint: nothing to judge


@pytest.mark.parametrize("k", [1, 0, 2.0, "3", None])
def test_an_average_of_fewer_than_two_checkpoints_is_refused(k):
    with pytest.raises(ValueError) as raised:
        CheckpointAverage(k, 4)
    assert str(raised.value) == f"averaging takes at least 2 checkpoints, not {k!r}."


def test_each_epochs_summaries_are_written_though_its_last_step_is_no_multiple_of_update_freq(tmp_path):
    model = small_model()
    x = np.random.default_rng(0).standard_normal((12, 3)).astype("float32")
    board = TensorBoard(str(tmp_path), update_freq=100)
    history = model.fit(x, x[:, :2], batch_size=4, epochs=2, verbose=0, callbacks=[board])  # 3 steps an epoch
    written = tensorboard_epoch_scalars(tmp_path / "train", steps=True)
    assert list(written["epoch_loss"]) == [0, 1]  # each at its epoch's number
    np.testing.assert_allclose(list(written["epoch_loss"].values()), history.history["loss"], rtol=1e-6)
    assert len(written["epoch_learning_rate"]) == 2


def trained_step(model, steps=1):
    x = np.ones((4 * steps, 3), "float32")
    model.fit(x, x[:, :2], batch_size=4, epochs=1, verbose=0)


def test_a_backup_saves_the_weights_and_where_the_run_was_and_keeps_one_copy(tmp_path, clock):
    model = small_model()
    backup = Backup(tmp_path / "backup", every_steps=2)
    backup.set_model(model)
    assert backup.saved_step() == 0  # nothing yet
    backup.on_train_begin()  # at 100 s: the first step's wait is not counted,
    trained_step(model)
    clock.now = 130.0
    backup.on_train_batch_end(0, {"loss": 1.0})  # its end is: the clock starts here
    trained_step(model)
    clock.now = 137.5
    backup.on_train_batch_end(1, {"loss": 1.0})  # step 2: a multiple of every_steps
    folder = tmp_path / "backup"
    state = json.loads((folder / "state.json").read_text())
    assert state == {"epoch": 0, "step": 2, "seconds": 7.5, "weights": "step-2.weights.h5"}
    assert backup.saved_step() == 2
    saved = model.get_weights()
    trained_step(model)
    backup.on_epoch_end(0)  # step 3, the epoch's end: epoch 1 is next
    assert sorted(path.name for path in folder.iterdir()) == ["state.json", "step-3.weights.h5"]
    assert json.loads((folder / "state.json").read_text())["epoch"] == 1
    resumed = small_model()
    assert Backup(folder).restore(resumed) == 1
    assert not np.allclose(resumed.get_weights()[0], saved[0])  # step 3's, not step 2's
    for got, expected in zip(resumed.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_array_equal(got, expected)
    assert int(resumed.optimizer.iterations.numpy()) == 3


def test_a_restored_backup_goes_on_from_its_step_and_its_seconds(tmp_path, clock):
    folder = tmp_path / "backup"
    model = small_model()
    trained_step(model, steps=5)
    first = Backup(folder)
    first.set_model(model)
    first.on_train_begin()
    first.on_train_batch_end(0, {})
    clock.now = 112.0
    first.on_epoch_end(1)
    resumed = small_model()
    backup = Backup(folder)
    assert backup.restore(resumed) == 2
    assert (backup.epoch, backup.seconds, backup.restored_step) == (2, 12.0, 5)
    backup.set_model(resumed)
    backup.on_train_begin()  # 12 s spent before the restart go on counting from the first step's end
    clock.now = 200.0
    backup.on_train_batch_end(0, {"loss": 0.5})
    clock.now = 203.0
    backup.save(2)
    assert json.loads((folder / "state.json").read_text())["seconds"] == 15.0
    fresh = Backup(tmp_path / "none")
    assert fresh.restore(small_model()) == 0 and fresh.restored_step is None  # nothing to resume


def test_by_default_a_backup_is_written_every_500_steps(tmp_path):
    model = small_model()
    backup = Backup(tmp_path)
    backup.set_model(model)
    backup.on_train_begin()
    assert backup.interrupted is False
    for step in (499, 500):
        model.optimizer.iterations.assign(step)
        backup.on_train_batch_end(0, {"loss": 1.0})
        assert backup.saved_step() == (500 if step == 500 else 0)


def test_a_backup_does_not_write_where_it_is_told_not_to_nor_weights_that_are_not_finite(tmp_path):
    model = small_model()
    trained_step(model)
    reader = Backup(tmp_path / "worker", write=False)
    reader.set_model(model)
    reader.on_train_begin()
    reader.on_epoch_end(0)
    assert not (tmp_path / "worker").exists()
    backup = Backup(tmp_path / "chief")
    backup.set_model(model)
    backup.on_train_begin()
    backup.on_epoch_end(0)
    model.set_weights([np.full_like(w, math.inf) for w in model.get_weights()])
    trained_step(model)
    backup.on_epoch_end(1)
    assert json.loads((tmp_path / "chief" / "state.json").read_text())["step"] == 1  # the last good copy


def test_a_loss_that_is_not_finite_stops_the_run_naming_the_last_good_copy(tmp_path):
    model = small_model()
    backup = Backup(tmp_path, every_steps=1)
    backup.set_model(model)
    backup.on_train_begin()
    backup.on_train_batch_end(0, None)  # no logs: nothing to judge
    trained_step(model, steps=3)
    with pytest.raises(TrainingDiverged) as raised:
        backup.on_train_batch_end(0, {"loss": float("nan")})
    assert str(raised.value) == (
        "the loss became nan at step 3; training stopped and nothing was saved. Lower --learning-rate-scale or set "
        "--clipnorm and run again with the same --out to go on from there."
    )
    backup.on_train_batch_end(1, {"loss": 2.0})  # a good step 3, saved
    trained_step(model, steps=1234)
    with pytest.raises(TrainingDiverged) as raised:
        backup.on_train_batch_end(1, {"loss": float("inf")})
    assert str(raised.value).startswith(
        f"the loss became inf at step 1,237; training stopped and the last good weights are in {tmp_path} (step 3). "
    )
    assert backup.saved_step() == 3


class Interrupt(keras.callbacks.Callback):
    """Sends SIGINT to this process at the end of batch `at` (after the backup's own call of it)."""

    def __init__(self, at):
        super().__init__()
        self.at = at

    def on_train_batch_end(self, batch, logs=None):
        if batch == self.at:
            signal.raise_signal(signal.SIGINT)


@pytest.mark.parametrize("at, step, epoch", [(1, 3, 0), (2, 4, 0), (3, 4, 1)])
def test_ctrl_c_saves_at_the_next_step_or_epochs_end_and_stops_with_what_to_do(tmp_path, at, step, epoch):
    """4 steps an epoch, SIGINT after batch `at` of the first: saved at the next step's end, in epoch 0 (the
    epoch a resume reads past that step in), or, when it came after the last batch, at the epoch's end (epoch 1
    next)."""
    model = small_model()
    backup = Backup(tmp_path, every_steps=1000)
    x = np.ones((16, 3), "float32")
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(TrainingInterrupted) as raised, backup.guard_interrupts():
        model.fit(x, x[:, :2], batch_size=4, epochs=3, verbose=0, callbacks=[backup, Interrupt(at)])
    assert signal.getsignal(signal.SIGINT) is before
    assert backup.interrupted
    assert str(raised.value) == (
        f"interrupted at step {step}; the run is saved in {tmp_path}. Run the same command again to resume it."
    )
    state = json.loads((tmp_path / "state.json").read_text())
    assert (state["step"], state["epoch"]) == (step, epoch)
    assert int(model.optimizer.iterations.numpy()) == step


def test_a_second_ctrl_c_acts_at_once(tmp_path):
    """The first SIGINT is the backup's; the handler before it (here one recording its calls) takes the second."""
    calls = []
    outer = signal.signal(signal.SIGINT, lambda signum, frame: calls.append(signum))
    try:
        backup = Backup(tmp_path)
        with backup.guard_interrupts():
            signal.raise_signal(signal.SIGINT)
            assert backup.interrupted and calls == []
            signal.raise_signal(signal.SIGINT)  # acts at once: the handler from before the guard
            assert calls == [signal.SIGINT]
        signal.raise_signal(signal.SIGINT)
        assert calls == [signal.SIGINT] * 2
    finally:
        signal.signal(signal.SIGINT, outer)


def test_several_workers_stop_together_by_what_they_were_told_in_common_not_by_their_own_signal(tmp_path):
    """Under `fit_across_workers` each step's all-reduce says whether any worker was interrupted (`shared_interrupted`);
    a worker goes by that, not by its own Ctrl-C."""
    model = small_model()
    backup = Backup(tmp_path, every_steps=1000)
    backup.set_model(model)
    backup.on_train_begin()
    trained_step(model)
    backup.shared_interrupted = False
    with backup.guard_interrupts():
        signal.raise_signal(signal.SIGINT)  # this worker's own: not yet agreed
        backup.on_train_batch_end(0, {"loss": 1.0})
        backup.shared_interrupted = True
        with pytest.raises(TrainingInterrupted, match="^interrupted at step 1;"):
            backup.on_train_batch_end(0, {"loss": 1.0})
    other = Backup(tmp_path / "other", write=False)  # another worker, told by the chief's signal
    other.set_model(model)
    other.on_train_begin()
    other.shared_interrupted = True
    with pytest.raises(TrainingInterrupted):
        other.on_epoch_end(0)


def test_a_backup_from_before_state_json_named_its_weights_reads_latest_weights(tmp_path):
    model = small_model()
    trained_step(model, steps=2)
    model.save_weights(tmp_path / "latest.weights.h5")
    (tmp_path / "state.json").write_text(json.dumps({"epoch": 1, "step": 2, "seconds": 3.0}))
    resumed = small_model()
    assert Backup(tmp_path).restore(resumed) == 1
    for got, expected in zip(resumed.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(
    "state, weights, message",
    [
        ("{not json", None, "{state}: not a backup's state (JSONDecodeError("),
        ('{"epoch": 1, "step": 2}', None, "{state}: not a backup's state (KeyError('seconds'))"),
        ('{"epoch": 1, "step": 2, "seconds": 1.0, "weights": "step-2.weights.h5"}', None,
         "{folder}/step-2.weights.h5: missing, though state.json names it"),
        ('{"epoch": 1, "step": 2, "seconds": 1.0, "weights": "step-2.weights.h5"}', b"half a file",
         "{folder}/step-2.weights.h5: cannot be read ("),
    ],
)  # fmt: skip
def test_a_damaged_backup_names_the_file_and_what_is_wrong_with_it(tmp_path, state, weights, message):
    (tmp_path / "state.json").write_text(state)
    if weights is not None:
        (tmp_path / "step-2.weights.h5").write_bytes(weights)
    with pytest.raises(DamagedBackup) as raised:
        Backup(tmp_path).restore(small_model())
    assert str(raised.value).startswith(message.format(state=tmp_path / "state.json", folder=tmp_path))
