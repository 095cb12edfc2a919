"""What a node sends home is unpacked without trusting it (``profiler.cluster.inventory``).

A hostile node's tar stream plants a symlink out of the cell folder and writes a file
through it. The ``tar -xf`` this replaced (GNU tar 1.34) refused the file in the same
stream but made the link at its end, and the next node's stream into the same cell
folder wrote through it, outside. Each case runs with
``tarfile``'s ``filter="data"`` and with the fallback of Pythons without filters
(Debian 12's 3.11.2). ``collect`` is run with the node's real packing command, started
here instead of over ssh.
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from profiler import safe_tar as unpack
from profiler.cluster.inventory.cluster import InventoryCluster


@pytest.fixture(params=["filter-data", "fallback"])
def mode(request, monkeypatch):
    if request.param == "filter-data" and not unpack.HAS_FILTERS:
        pytest.skip("this Python's tarfile has no extraction filters (PEP 706)")
    monkeypatch.setattr(unpack, "HAS_FILTERS", request.param == "filter-data")
    return request.param


def _tar(members: list[tuple[str, str, str | bytes]]) -> io.BytesIO:
    """A tar stream of (kind, name, data or link target) members, in that order."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for kind, name, value in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                data = value.encode() if isinstance(value, str) else value
                info.size, info.mode = len(data), 0o4777  # set-uid, writable by all
                tar.addfile(info, io.BytesIO(data))
            elif kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.type = tarfile.SYMTYPE if kind == "symlink" else tarfile.LNKTYPE
                info.linkname = value
                tar.addfile(info)
    out.seek(0)
    return out


@pytest.mark.parametrize("members", [
    # A link out of the folder, then a file written through it.
    [("symlink", "logs", "{outside}"), ("file", "logs/planted", "x")],
    # The link alone: tar -xf made it, and the next node's stream wrote through it.
    [("symlink", "logs", "{outside}")],
    [("symlink", "up", "../../outside"), ("file", "up/planted", "x")],
    [("file", "../outside/planted", "x")],
    [("link", "hard", "{outside}/secret")],
], ids=["absolute-link", "link-alone", "relative-link", "dot-dot", "hard-link"])
def test_a_member_reaching_out_of_the_folder_is_refused(members, mode, tmp_path):
    dest, outside = tmp_path / "cell" / "attempt-1", tmp_path / "outside"
    dest.mkdir(parents=True)
    outside.mkdir()
    (outside / "secret").write_text("the controller's")
    members = [(kind, name.format(outside=outside), value.format(outside=outside))
               for kind, name, value in [("file", "events/worker-0.jsonl", "ok")] + members]
    with pytest.raises(unpack.UnsafeMember):
        unpack.unpack_stream(_tar(members), dest)
    assert sorted(p.name for p in outside.iterdir()) == ["secret"]
    assert not any(p.is_symlink() for p in dest.rglob("*"))


def test_an_absolute_name_lands_inside_the_folder(mode, tmp_path):
    dest, outside = tmp_path / "cell", tmp_path / "outside"
    outside.mkdir()
    unpack.unpack_stream(_tar([("file", f"{outside}/planted", "x")]), dest)
    assert list(outside.iterdir()) == []
    assert (dest / str(outside).lstrip("/") / "planted").read_text() == "x"


def test_a_cell_folder_unpacks_whole_with_safe_modes(mode, tmp_path):
    dest = tmp_path / "cell"
    unpack.unpack_stream(_tar([("dir", ".", ""), ("dir", "./events", ""),
                               ("file", "./events/worker-0.jsonl", '{"event": "end"}\n'),
                               ("file", "./metrics/n1/seg-000001.lp", b"cpu x=1\n")]), dest)
    assert (dest / "events" / "worker-0.jsonl").read_text() == '{"event": "end"}\n'
    assert (dest / "metrics" / "n1" / "seg-000001.lp").read_bytes() == b"cpu x=1\n"
    # No set-uid bit, no write for group or others, whoever the archive named.
    mode_bits = (dest / "events" / "worker-0.jsonl").stat().st_mode & 0o7777
    assert mode_bits == 0o755 and (dest / "events").stat().st_uid == os.geteuid()


def _collecting(tmp_path: Path, monkeypatch) -> tuple[InventoryCluster, Path, Path]:
    """An inventory cluster whose one node is this host: ``collect`` runs the node's real
    packing command on a local folder standing for the node's copy."""
    cluster = InventoryCluster([])
    remote = tmp_path / "node" / "attempt-1"
    remote.mkdir(parents=True)
    monkeypatch.setattr(cluster, "host", lambda node: None)
    monkeypatch.setattr(cluster, "remote_cell_dir", lambda node, cell_dir: remote)
    monkeypatch.setattr(cluster, "ssh_argv", lambda host, argv: list(argv))
    cell_dir = tmp_path / "sweep" / "cells" / "0123456789ab" / "attempt-1"
    cell_dir.mkdir(parents=True)
    return cluster, remote, cell_dir


def test_collect_refuses_a_planted_link_and_keeps_the_node_copy(mode, tmp_path, monkeypatch):
    cluster, remote, cell_dir = _collecting(tmp_path, monkeypatch)
    outside = tmp_path / "outside"
    outside.mkdir()
    (remote / "events").mkdir()
    (remote / "events" / "worker-0.jsonl").write_text("{}\n")
    (remote / "logs").symlink_to(outside)
    try:
        problems = cluster.collect(cell_dir, [SimpleNamespace(name="n1")])
    finally:
        cluster.close()
    assert len(problems) == 1 and problems[0].startswith("n1: refused what it sent:")
    assert not (cell_dir / "logs").is_symlink() and list(outside.iterdir()) == []
    assert (remote / "events" / "worker-0.jsonl").exists()  # not answered ok: kept


def test_collect_brings_a_cell_folder_home_and_removes_the_node_copy(mode, tmp_path,
                                                                      monkeypatch):
    cluster, remote, cell_dir = _collecting(tmp_path, monkeypatch)
    (remote / "events").mkdir()
    (remote / "events" / "worker-0.jsonl").write_text("{}\n")
    (remote / "pids").write_text("123\n")  # the agents' pids stay behind
    try:
        assert cluster.collect(cell_dir, [SimpleNamespace(name="n1")]) == []
    finally:
        cluster.close()
    assert (cell_dir / "events" / "worker-0.jsonl").read_text() == "{}\n"
    assert not (cell_dir / "pids").exists() and not remote.exists()


def test_a_node_the_cell_started_nothing_on_has_nothing_to_fetch(mode, tmp_path,
                                                                   monkeypatch):
    """No folder on the node (a hierarchy's edge node in End-Cloud, no agent): no problem
    reported, nothing unpacked."""
    cluster, remote, cell_dir = _collecting(tmp_path, monkeypatch)
    remote.rmdir()
    try:
        assert cluster.collect(cell_dir, [SimpleNamespace(name="n2")]) == []
    finally:
        cluster.close()
    assert list(cell_dir.iterdir()) == []
