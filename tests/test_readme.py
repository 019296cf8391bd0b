"""The README's quick start runs as written (a new user's first contact with the library)."""

import re
from pathlib import Path

import matplotlib

README = Path(__file__).resolve().parents[1] / "README.md"


def test_quick_start_runs(tmp_path, monkeypatch, capsys):
    matplotlib.use("Agg")
    code = re.search(r"## Quick start\n\n```python\n(.*?)```", README.read_text(), re.S).group(1)
    assert len(code.strip().splitlines()) <= 20
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README quick start", "exec"), {})
    out = capsys.readouterr().out
    accuracy = {m.group(1).strip(): float(m.group(2)) for m in re.finditer(r"^(.+?)\s+accuracy ([0-9.]+)", out, re.M)}
    assert accuracy["oracle"] == 1.0
    assert accuracy["level 2"] > accuracy["first order"] + 0.2   # the two-level memory learns the map
    assert accuracy["EM"] > 0.95
    assert (tmp_path / "l2_accuracy.png").stat().st_size > 0


def test_two_setup_commands_are_there():
    text = README.read_text()
    assert "pip install -e . && hmmmerge demo" in text
    ci = (README.parent / ".ci" / "run").read_text()
    assert 'pip install -e ".[test]" && python -m pytest -q' in text and 'pip install -e ".[test]" && python -m pytest -q' in ci


def test_paper_to_code_table_names_real_objects():
    """Every name in the README's "Paper -> code" table resolves to a function, class or method."""
    import importlib

    section = README.read_text().split("## Paper -> code", 1)[1].split("\n## ", 1)[0]
    names = re.findall(r"`(hmmmerge\.[\w.]+)`", section)
    assert len(names) >= 15
    for name in names:
        parts = name.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
            assert callable(obj), name
            break
        else:
            raise AssertionError(f"{name} does not resolve")


def test_library_map_names_every_module_and_the_readme_stands_alone():
    """Every module of the package (public ones, and the internal kernels named beside them) is in the
    "Library map", and the README sends no reader to files outside the package."""
    import pkgutil

    import hmmmerge

    text = README.read_text()
    section = text.split("## Library map", 1)[1].split("\n## ", 1)[0]
    mapped = set(re.findall(r"`([\w.]+)`", section))
    modules = {m.name for m in pkgutil.iter_modules(hmmmerge.__path__)} - {"__main__"}
    public = {m for m in modules if not m.startswith("_")}
    assert public <= mapped, sorted(public - mapped)
    # kernels anywhere: by their name (``_em_kernels``) or, when the name alone is ambiguous, dotted (``fold._kernels``)
    every = [m.name.removeprefix("hmmmerge.") for m in pkgutil.walk_packages(hmmmerge.__path__, "hmmmerge.")]
    kernels = {m for m in every if m.rpartition(".")[2].endswith("_kernels")}
    unmapped = {m for m in kernels if m not in mapped and (m.rpartition(".")[2] == "_kernels"
                                                           or m.rpartition(".")[2] not in mapped)}
    assert not unmapped, sorted(unmapped)
    fold = {m for m in every if m.startswith("fold.")}   # the engine's modules, each by its dotted name
    assert fold <= mapped, sorted(fold - mapped)
    assert "../shared" not in text and "REFERENCE.md" not in text
