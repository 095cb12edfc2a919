"""``edgeprof data fetch`` against a real HTTP server on 127.0.0.1.

The server serves small files in the real formats (MNIST IDX .gz, a CIFAR-10 binary
tar.gz); the test passes their MD5s as the manifest, since the published checksums
belong to the full-size files.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import tarfile
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from profiler.data import fetch as fetching
from profiler.data.cli import data
from profiler.errors import DataError
from workloads.datasets import resolver

from test_datasets import make_cifar, make_mnist  # tests/unit is on sys.path (rootdir-less)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output clean
        pass


@pytest.fixture
def mirror(tmp_path):
    """(base URL, served folder, request log): a threaded HTTP server on loopback."""
    served = tmp_path / "served"
    served.mkdir()
    requests_seen = []

    class Handler(_QuietHandler):
        def do_GET(self):
            requests_seen.append(self.path)
            super().do_GET()

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(served)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/", served, requests_seen
    server.shutdown()
    server.server_close()


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def _serve_small_datasets(served: Path, tmp_path: Path) -> dict:
    make_mnist(served, gz=True)
    make_cifar(tmp_path / "build" / "cifar-10-batches-bin")
    archive = served / "cifar-10-binary.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "build" / "cifar-10-batches-bin", arcname="cifar-10-batches-bin")
    return {
        "mnist": tuple(fetching.Resource("mnist", r.filename, _md5(served / r.filename))
                       for r in fetching.MANIFEST["mnist"]),
        "cifar10": (fetching.Resource("cifar10", archive.name, _md5(archive),
                                      extract="cifar-10-batches-bin"),),
    }


def test_fetch_downloads_verifies_extracts_then_skips(mirror, tmp_path):
    url, served, seen = mirror
    manifest = _serve_small_datasets(served, tmp_path)
    out = tmp_path / "data"
    mirrors = {"mnist": url, "cifar10": url}
    outcome = fetching.fetch(out, mirrors=mirrors, manifest=manifest)
    assert set(outcome.values()) == {"downloaded"} and len(outcome) == 5
    assert resolver.check("lenet-mlp", out) == "mnist"
    assert resolver.check("resnet", out) == "cifar10"
    assert not list(out.rglob("*.part")) and not list(out.rglob(".extract-*"))

    requests_before = len(seen)
    again = fetching.fetch(out, mirrors=mirrors, manifest=manifest)
    assert set(again.values()) == {"present"}
    assert len(seen) == requests_before  # nothing downloaded the second time


def test_corrupt_download_is_rejected_and_not_kept(mirror, tmp_path):
    url, served, _ = mirror
    manifest = _serve_small_datasets(served, tmp_path)
    victim = served / "t10k-images-idx3-ubyte.gz"
    victim.write_bytes(victim.read_bytes()[:-10] + b"0123456789")
    out = tmp_path / "data"
    with pytest.raises(DataError, match="checksum mismatch.*t10k-images"):
        fetching.fetch(out, ["mnist"], mirrors={"mnist": url}, manifest=manifest)
    assert not (out / "mnist" / "t10k-images-idx3-ubyte.gz").exists()
    assert not list(out.rglob("*.part"))


def test_missing_file_on_mirror_is_one_line(mirror, tmp_path):
    url, served, _ = mirror
    manifest = _serve_small_datasets(served, tmp_path)
    (served / "cifar-10-binary.tar.gz").unlink()
    with pytest.raises(DataError, match=r"cannot download .*cifar-10-binary.tar.gz: 404"):
        fetching.fetch(tmp_path / "data", ["cifar10"], mirrors={"cifar10": url},
                       manifest=manifest)


def test_cli_fetch_and_errors(mirror, tmp_path, monkeypatch):
    url, served, _ = mirror
    manifest = _serve_small_datasets(served, tmp_path)
    monkeypatch.setattr(fetching, "MANIFEST", manifest)
    monkeypatch.setattr(fetching, "fetch",
                        functools.partial(fetching.fetch, manifest=manifest))
    runner = CliRunner()
    out = tmp_path / "data"
    result = runner.invoke(data, ["fetch", "--data-dir", str(out), "--dataset", "mnist",
                                  "--mnist-mirror", url])
    assert result.exit_code == 0, result.output
    assert "downloaded" in result.output and "data ready" in result.output

    bad = runner.invoke(data, ["fetch", "--data-dir", str(out), "--dataset", "imagenet"])
    assert bad.exit_code == 2 and "imagenet" in bad.output

    (served / "train-labels-idx1-ubyte.gz").write_bytes(b"corrupt")
    (out / "mnist" / "train-labels-idx1-ubyte.gz").unlink()
    failed = runner.invoke(data, ["fetch", "--data-dir", str(out), "--dataset", "mnist",
                                  "--mnist-mirror", url])
    assert failed.exit_code == 2
    assert "checksum mismatch" in failed.output and "Traceback" not in failed.output


def test_published_checksums_are_the_known_ones():
    md5s = {r.filename: r.md5 for rs in fetching.MANIFEST.values() for r in rs}
    assert md5s["cifar-10-binary.tar.gz"] == "c32a1d4ab5d03f1284b67883e8d87530"
    assert md5s["train-images-idx3-ubyte.gz"] == "f68b3c2dcbeaaa9fbdd348bbdeb94873"
    assert len(md5s) == 5


def test_mirror_credentials_never_in_messages(mirror, tmp_path):
    url, served, _ = mirror
    manifest = _serve_small_datasets(served, tmp_path)
    (served / "cifar-10-binary.tar.gz").unlink()
    private = url.replace("http://", "http://reader:s3cret@")
    with pytest.raises(DataError) as caught:
        fetching.fetch(tmp_path / "data", ["cifar10"], mirrors={"cifar10": private},
                       manifest=manifest)
    assert "s3cret" not in str(caught.value) and "127.0.0.1" in str(caught.value)


@pytest.mark.parametrize("filters", [True, False])
def test_an_archive_member_out_of_its_folder_is_refused(tmp_path, monkeypatch, filters):
    """With Python's tar filters and without them (Debian 12's 3.11.2 has none): a member
    whose name climbs out of the folder is refused in one line, nothing written outside."""
    from profiler import safe_tar

    if filters and not safe_tar.HAS_FILTERS:
        pytest.skip("this Python has no tarfile filters")  # the fallback case still runs
    monkeypatch.setattr(safe_tar, "HAS_FILTERS", filters)
    archive = tmp_path / "set.tar"
    payload = tmp_path / "payload"
    payload.write_bytes(b"x")
    with tarfile.open(archive, "w") as tar:
        tar.add(payload, arcname="set/ok.bin")
        tar.add(payload, arcname="set/../../escaped.bin")
    with pytest.raises(DataError, match="cannot extract"):
        fetching._extract(archive, "set")
    assert not (tmp_path.parent / "escaped.bin").exists()
    assert not (tmp_path / "escaped.bin").exists()
