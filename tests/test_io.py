"""Atomic writes: whole files with the permissions an ordinary write would give."""

import os

import numpy as np

from hmmmerge._io import atomic_savez, atomic_write_text


def test_atomic_files_get_ordinary_permissions(tmp_path):
    plain = tmp_path / "plain.txt"
    plain.write_text("x")
    atomic_write_text(tmp_path / "a.txt", "hello")
    atomic_savez(tmp_path / "b.npz", x=np.arange(3))
    want = os.stat(plain).st_mode & 0o777
    assert os.stat(tmp_path / "a.txt").st_mode & 0o777 == want
    assert os.stat(tmp_path / "b.npz").st_mode & 0o777 == want
    assert (tmp_path / "a.txt").read_text() == "hello"
    assert np.load(tmp_path / "b.npz")["x"].tolist() == [0, 1, 2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt", "b.npz", "plain.txt"]  # no temp left
