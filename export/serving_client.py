"""Query the TF Serving model of `kformer export`, or replay its example request locally.

    python export/serving_client.py EXPORT_DIR --url http://localhost:8501   # a running TF Serving
    python export/serving_client.py EXPORT_DIR                               # no server: load the SavedModel

Either way it sends serving/request.json ({"instances": [...]}) to the
serving_default signature and checks the answer against serving/response.json.
Locally it needs only tensorflow and tensorflow_text (for the tokenizer ops).
"""

import argparse
import json
import sys
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from wordpiece import ExportFolderError, read_manifest  # noqa: E402


def predict_over_http(url, name, request):
    body = json.dumps(request).encode("utf-8")
    post = urllib.request.Request(f"{url}/v1/models/{name}:predict", data=body, method="POST")
    with urllib.request.urlopen(post, timeout=60) as reply:
        return json.loads(reply.read().decode("utf-8"))


def predict_locally(export_dir, name, request):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops before loading)

    versions = sorted((Path(export_dir) / "saved_model" / name).iterdir(), key=lambda p: int(p.name))
    signature = tf.saved_model.load(str(versions[-1])).signatures["serving_default"]
    translations = signature(texts=tf.constant(request["instances"]))["translations"].numpy()
    return {"predictions": [t.decode("utf-8") for t in translations]}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("export_dir")
    parser.add_argument("--url", help="TF Serving's REST address, e.g. http://localhost:8501")
    args = parser.parse_args()
    serving = Path(args.export_dir) / "serving"
    try:
        name = read_manifest(args.export_dir, "serving/request.json", "saved_model")["name"]
    except ExportFolderError as error:
        sys.exit(f"{parser.prog}: error: {error}")
    request = json.loads((serving / "request.json").read_text(encoding="utf-8"))
    expected = json.loads((serving / "response.json").read_text(encoding="utf-8"))
    if args.url:
        response = predict_over_http(args.url, name, request)
    else:
        response = predict_locally(args.export_dir, name, request)
    print(json.dumps(response, ensure_ascii=False))
    if response["predictions"] != expected["predictions"]:
        raise SystemExit(f"the response differs from serving/response.json: {expected['predictions']}")


if __name__ == "__main__":
    main()
