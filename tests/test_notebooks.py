"""Every notebook under notebooks/ executes top to bottom (each asserts its own results)."""

import os
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def test_notebooks_are_stored_without_outputs():
    nbformat = pytest.importorskip("nbformat")
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.outputs, f"{path.name} is stored with outputs; clear them before committing"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    if "minigrid" in path.stem:
        pytest.importorskip("minigrid", reason="the [gym] extra is not installed: pip install -e '.[gym]'")
    monkeypatch.setenv("MPLBACKEND", "Agg")  # the kernel inherits the environment: no display needed
    monkeypatch.setenv("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
