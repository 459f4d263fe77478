"""Two local workers on a large corpus: each reads its part; one killed with SIGKILL resumes (issue 29).

1. Reading: each worker's share of the training stream read alone, with the bytes the
   process read (/proc/self/io's rchar) and the seconds, for its byte part of the file
   (`TrainingStream.share`) and for the every-n-th share that reads the whole file.
2. Resuming: `kformer train --strategy multiworker` on two local workers (worker 0 the
   chief), run whole; then again into another directory, where worker 1 is killed with
   SIGKILL once the chief's backup has reached `--kill-after` steps (mid-epoch), worker 0
   is stopped (SIGKILL too, if the lost worker has not ended it within a minute), and the
   same command is rerun on both. Reports both runs' step counts and the relative
   difference of their weights.

    python3 bench/workers.py /tmp/corpora/pairs-1m.tsv [--steps-per-epoch 150 --kill-after 200]
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read_bytes():
    with open("/proc/self/io") as io:
        return int(next(line for line in io if line.startswith("rchar:")).split()[1])


def reading(data):
    from kformer.data.stream import corpus_splits

    train = corpus_splits(data, sample_size=200_000, held_out=1000, verbose=0)["train"]
    report = {"file_mb": round(train.corpus.size / 2**20, 1)}
    for way in ("part of the bytes", "every 2nd pair"):
        for index in (0, 1):
            share = train.share(index, 2)
            if way == "every 2nd pair":
                share.corpus, share._share = train.corpus, (index, 2)  # the way that reads the whole file
            before, began = read_bytes(), time.perf_counter()
            pairs = sum(1 for _ in share)
            report[f"{way}, worker {index}"] = {
                "pairs": pairs,
                "read_mb": round((read_bytes() - before) / 2**20, 1),
                "seconds": round(time.perf_counter() - began, 1),
            }
    return report


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def start_workers(command, logs):
    hosts = [f"127.0.0.1:{port}" for port in free_ports(2)]
    workers = []
    for index in range(2):
        tf_config = json.dumps({"cluster": {"worker": hosts}, "task": {"type": "worker", "index": index}})
        env = dict(os.environ, TF_CONFIG=tf_config, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=REPO)
        with open(f"{logs}-{index}.log", "a") as log:  # the child keeps its own copy of the descriptor
            workers.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT))
    return workers


def finish(workers):
    codes = [worker.wait() for worker in workers]
    if any(codes):
        raise SystemExit(f"a worker failed ({codes}); see its log")


def weights(directory):
    import numpy as np

    from kformer.model_dir import load

    trained = load(directory)
    flat = np.concatenate([w.ravel() for w in trained.model.get_weights()])
    return flat, trained.config["result"]


def resuming(args, tmp):
    import numpy as np

    def command(out):
        return [
            sys.executable, "-m", "kformer", "train", "--data", os.path.abspath(args.data), "--out", out,
            "--strategy", "multiworker", "--epochs", "2", "--steps-per-epoch", str(args.steps_per_epoch),
            "--backup-steps", str(args.backup_steps), "--dropout", str(args.dropout), "--held-out", "500",
        ]  # fmt: skip

    report, began = {}, time.perf_counter()
    whole, killed = f"{tmp}/whole", f"{tmp}/killed"
    finish(start_workers(command(whole), f"{tmp}/whole"))
    report["whole_run_s"] = round(time.perf_counter() - began)
    print(f"whole run: {report['whole_run_s']} s", flush=True)

    began, state = time.perf_counter(), f"{killed}/training/backup/state.json"
    workers = start_workers(command(killed), f"{tmp}/killed")

    def backed_up():
        with open(state) as file:
            return json.load(file)["step"]

    while not (os.path.exists(state) and backed_up() >= args.kill_after):
        if any(worker.poll() is not None for worker in workers):
            raise SystemExit("a worker ended before the kill")
        time.sleep(0.2)
    workers[1].send_signal(signal.SIGKILL)
    report["killed_after_backup_of_step"] = backed_up()
    try:
        report["the chief, left alone"] = f"exited {workers[0].wait(timeout=60)} by itself"
    except subprocess.TimeoutExpired:
        workers[0].kill()
        report["the chief, left alone"] = "still waiting after 60 s: killed"
    workers[1].wait()
    began = time.perf_counter()
    finish(start_workers(command(killed), f"{tmp}/killed-rerun"))
    report["rerun_s"] = round(time.perf_counter() - began)
    (a, whole_result), (b, killed_result) = weights(whole), weights(killed)
    report["steps"] = {"whole": whole_result["steps"], "killed and rerun": killed_result["steps"]}
    report["resumed_from"] = killed_result.get("resumed_from")
    report["weights relative difference"] = float(np.linalg.norm(a - b) / np.linalg.norm(a))
    report["val_bleu"] = {"whole": whole_result.get("val_bleu"), "killed and rerun": killed_result.get("val_bleu")}
    return report


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data")
    parser.add_argument("--steps-per-epoch", type=int, default=150)
    parser.add_argument("--backup-steps", type=int, default=50)
    parser.add_argument("--kill-after", type=int, default=200, help="kill once the backup has this many steps")
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--work", default=None, help="a directory for the models and the workers' logs (kept)")
    parser.add_argument("--skip-reading", action="store_true")
    args = parser.parse_args()
    if not args.skip_reading:
        print(json.dumps(reading(args.data), indent=1), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        report = resuming(args, args.work or tmp)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
