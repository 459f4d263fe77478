"""`kformer train` on large corpora: time to the first step, peak memory, steps a second (issue 29).

Runs `kformer train --data FILE --out TMP --minutes M` in a fresh process with a
checkout's kformer first on the path (this one, or `--checkout DIR`, such as a
worktree of an older commit), and reports:

- first step: seconds from launching the command to the end of its first training step
  (reading, splitting, vocabularies, counting, building, the first batch, XLA);
- peak memory: the process's peak resident set (getrusage, so one command per run);
- steps/s: training steps a second over the second half of the steps (the first half
  includes an XLA compilation for each length bucket), measured by a callback this script
  adds to model.fit (wrapping `keras.Model.fit` in the process it drives: the command stays the CLI's,
  unchanged, in checkouts old and new; with `--stream-above` it also sets `STREAM_ABOVE_BYTES` there);
- median and longest step: over the same steps (a step that compiles a new shape is the longest);
- cpu s/step: the process's CPU seconds (user and system) a step over the same steps
  (where they go: `perf record -F 49 -g -p PID` during training; bench/RESULTS.md);
- steps: training steps run in the budget;
- before the first step: what the command printed until then, each line with the seconds
  since launch when it was printed (where the time goes).

Make the corpora with bench/make_corpus.py.

    python3 bench/stream.py /tmp/corpora/pairs-1m.tsv [--checkout /tmp/before] [--minutes 3] [--stream-above 0]
        [-- --flag value]
"""

import argparse
import json
import os
import resource
import tempfile
import time

import checkouts  # bench/checkouts.py, beside this script

DRIVER = r"""
import json, resource, sys, time
import keras
import kformer

fit = keras.Model.fit
marks = {"kformer": kformer.__file__}

class Clock(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.steps = 0
    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1
        now = time.time()
        if "first_step" not in marks:  # the process's peak so far: preparing, the first batch, XLA
            marks["first_step"] = now
            marks["peak_gb_before_training"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
        marks.setdefault("times", []).append(now)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        marks.setdefault("cpu", []).append(usage.ru_utime + usage.ru_stime)

def timed_fit(self, *args, callbacks=None, **kwargs):
    return fit(self, *args, callbacks=[Clock(), *(callbacks or [])], **kwargs)

keras.Model.fit = timed_fit

class Stamped:  # the time each line of the preparation's progress was printed
    def __init__(self, stream):
        self.stream = stream
    def write(self, text):
        if text.strip() and "\b" not in text and "\r" not in text and "━" not in text and "first_step" not in marks:
            marks.setdefault("lines", []).append([time.time(), text.strip()[:120]])
        return self.stream.write(text)
    def __getattr__(self, name):
        return getattr(self.stream, name)

sys.stdout = Stamped(sys.stdout)
if sys.argv[2] != "default":  # --stream-above: where a file is read as a stream instead of into memory
    import kformer.data.stream
    kformer.data.stream.STREAM_ABOVE_BYTES = int(sys.argv[2])
from kformer.cli import main
try:
    main(sys.argv[3:])
finally:
    with open(sys.argv[1], "w") as f:
        json.dump(marks, f)
"""


def run(data, checkout, minutes, extra, stream_above="default"):
    with tempfile.TemporaryDirectory() as tmp:
        marks_path = os.path.join(tmp, "marks.json")
        data = os.path.abspath(data)
        arguments = ["-c", DRIVER, marks_path, str(stream_above)]
        arguments += ["train", "--data", data, "--out", f"{tmp}/model", "--minutes", str(minutes), *extra]
        launched = time.time()
        result = checkouts.run(checkout, arguments, capture_output=True, text=True)
        ended = time.time()
        peak_gb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
        marks = json.load(open(marks_path)) if os.path.exists(marks_path) else {}
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    report = {
        "data": data,
        "kformer": marks.get("kformer"),
        "exit": result.returncode,
        "first_step_s": round(marks["first_step"] - launched, 1) if "first_step" in marks else None,
        "peak_gb": round(peak_gb, 2),
        "peak_gb_before_training": round(marks.get("peak_gb_before_training", 0.0), 2),
        "steps": len(marks.get("times", [])),
        "steps_per_s": None,
        "total_s": round(ended - launched, 1),
    }
    report["before_the_first_step"] = [f"{at - launched:6.1f} s  {line}" for at, line in marks.get("lines", [])]
    times = marks.get("times", [])
    if len(times) > 40:  # the second half: by then XLA has compiled each bucket's shape
        half = len(times) // 2
        report["steps_per_s"] = round((len(times) - 1 - half) / (times[-1] - times[half]), 3)
        gaps = sorted(b - a for a, b in zip(times[half:], times[half + 1 :], strict=False))
        report["median_step_s"], report["longest_step_s"] = round(gaps[len(gaps) // 2], 4), round(gaps[-1], 2)
        cpu = marks["cpu"]
        report["cpu_s_per_step"] = round((cpu[-1] - cpu[half]) / (len(times) - 1 - half), 4)
    if result.returncode:
        report["stderr_tail"] = result.stderr.strip().splitlines()[-3:]
    report["stdout"] = [line[-160:] for line in lines if "\b" not in line and "━" not in line][-8:]
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data")
    parser.add_argument("--checkout", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument(
        "--stream-above", default="default", help="bytes above which a file is streamed (0: always; default: kformer's)"
    )
    args, extra = parser.parse_known_args()  # more `kformer train` flags, after --
    extra = extra[1:] if extra[:1] == ["--"] else extra
    print(json.dumps(run(args.data, args.checkout, args.minutes, extra, args.stream_above), indent=1))


if __name__ == "__main__":
    main()
