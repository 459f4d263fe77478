"""The package's layout is its architecture: each subpackage imports only those below it."""

import ast
from pathlib import Path

import kformer

PACKAGE = Path(kformer.__file__).parent
# Lowest first. A module may import from its own part and the parts before it, never after.
LAYERS = ["files", "layers", "data", "model", "model_dir", "inference", "training", "deploy", "teaching", "cli"]


def _part(module):
    """'kformer.training.jobs' -> 'training'; the package root itself -> None."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def _imported_modules(path):
    """Every kformer module `path` imports, at the top or inside a function."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name.split(".")[0] == "kformer")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "kformer":
            if node.module == "kformer":  # from kformer import plots: the names may be modules
                yield from (f"kformer.{alias.name}" for alias in node.names)
            else:
                yield node.module


def _violations(package=PACKAGE):
    found = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        if relative.parts == ("__init__.py",) or relative.parts == ("__main__.py",):
            continue  # the package root registers and re-exports; `python -m kformer` runs the CLI
        part = relative.parts[0].removesuffix(".py")
        for module in _imported_modules(path):
            target = _part(module)
            if target is None and part != "cli":
                found.append(f"{relative} imports the package root")
            elif target is not None and target in LAYERS and LAYERS.index(target) > LAYERS.index(part):
                found.append(f"{relative} imports {module}")
    return found


def test_every_module_belongs_to_a_layer():
    parts = {path.relative_to(PACKAGE).parts[0].removesuffix(".py") for path in PACKAGE.glob("*")}
    assert parts - {"__init__", "__main__", "__pycache__"} == set(LAYERS)


def test_no_module_imports_a_layer_above_its_own():
    assert _violations() == []


def test_the_check_sees_an_upward_import(tmp_path):
    """The rule above would catch model_dir importing training again (as it once did)."""
    fake = tmp_path / "kformer"
    for relative in ("model_dir.py", "training/jobs.py", "cli.py"):
        (fake / relative).parent.mkdir(parents=True, exist_ok=True)
    (fake / "model_dir.py").write_text("def load():\n    import kformer.training.objectives\n")
    (fake / "training" / "jobs.py").write_text("from kformer.model_dir import load\nfrom kformer import layers\n")
    (fake / "cli.py").write_text("import kformer\n")
    assert _violations(fake) == ["model_dir.py imports kformer.training.objectives"]
