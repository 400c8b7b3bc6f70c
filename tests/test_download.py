"""data/cached_fineweb10B.py against a local HTTP server that can cut transfers short or ignore Range."""
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

import cached_fineweb10B
from conftest import random_documents
from fineweb import write_shard

VAL, TRAIN1, TRAIN2 = "fineweb_val_000000.bin", "fineweb_train_000001.bin", "fineweb_train_000002.bin"
SCRIPT_TIMEOUT = cached_fineweb10B.TIMEOUT  # before the fixture below shortens it


class ShardHandler(BaseHTTPRequestHandler):
    """Serves server.files by name, honouring open-ended Range requests (bytes=N-) unless server.ignore_range;
    successive responses for a name stop short at the offsets listed in server.cuts[name]."""

    def do_GET(self):
        server, name, range_header = self.server, self.path.rsplit("/", 1)[-1], self.headers.get("Range")
        server.requests.append((name, range_header))
        data = server.files.get(name)
        if data is None:
            self.send_error(404)
            return
        start = 0
        if range_header and not server.ignore_range:
            start = int(re.fullmatch(r"bytes=(\d+)-", range_header)[1])
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        # advertise the whole rest of the file, but stop at the next of cuts[name] as if the server died there
        cuts = server.cuts.get(name)
        self.wfile.write(data[start:cuts.pop(0) if cuts else len(data)])

    def log_message(self, *args):
        pass


def shard_bytes(tmp_path, seed, magic=None, drop_bytes=0):
    """A generated shard's bytes; optionally with a wrong magic, or with its last bytes cut off."""
    path = tmp_path / f"source_{seed}.bin"
    write_shard(path, np.concatenate(random_documents(np.random.default_rng(seed), 20)))
    data = bytearray(path.read_bytes())
    if magic is not None:
        data[:4] = np.int32(magic).tobytes()
    return bytes(data[:len(data) - drop_bytes])


@pytest.fixture
def server(tmp_path):
    """A local server holding a val shard and two train shards; base_url is where the script should look."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), ShardHandler)
    server.files = {name: shard_bytes(tmp_path, seed) for seed, name in enumerate([VAL, TRAIN1, TRAIN2])}
    server.cuts, server.ignore_range, server.requests = {}, False, []
    server.base_url = f"http://127.0.0.1:{server.server_address[1]}/shards"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch):
    monkeypatch.setattr(cached_fineweb10B, "BACKOFF", 0.0)
    monkeypatch.setattr(cached_fineweb10B, "TIMEOUT", 5)
    for var in ("no_proxy", "NO_PROXY"):  # a proxy set in the environment must not get these requests
        monkeypatch.setenv(var, "127.0.0.1")


def run(server, out_dir, num_train_shards=2):
    return cached_fineweb10B.main([str(num_train_shards), "--base_url", server.base_url, "--out_dir", str(out_dir)])


def test_fresh_download_matches_source(server, tmp_path):
    out = tmp_path / "out"
    assert run(server, out) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted([VAL, TRAIN1, TRAIN2])
    for name in (VAL, TRAIN1, TRAIN2):
        assert (out / name).read_bytes() == server.files[name]
    assert server.requests == [(VAL, None), (TRAIN1, None), (TRAIN2, None)]


def test_complete_files_are_skipped_without_a_request(server, tmp_path):
    out = tmp_path / "out"
    assert run(server, out, num_train_shards=1) == 0
    server.requests.clear()
    assert run(server, out, num_train_shards=2) == 0
    assert server.requests == [(TRAIN2, None)]
    server.requests.clear()
    assert run(server, out) == 0
    assert server.requests == []


def test_interrupted_transfer_leaves_partial_and_next_run_resumes(server, tmp_path, capsys):
    out, cut = tmp_path / "out", 3000
    server.cuts[TRAIN1] = [cut] * cached_fineweb10B.ATTEMPTS  # the server goes down at byte 3000 for this run
    assert run(server, out) == 1
    err = capsys.readouterr().err
    assert f"error: {TRAIN1}: download failed" in err and "resume" in err
    assert (out / f"{TRAIN1}.partial").read_bytes() == server.files[TRAIN1][:cut]
    assert not (out / TRAIN1).exists() and not (out / TRAIN2).exists()

    server.requests.clear()
    assert run(server, out) == 0
    assert server.requests == [(TRAIN1, f"bytes={cut}-"), (TRAIN2, None)]
    assert (out / TRAIN1).read_bytes() == server.files[TRAIN1]
    assert not (out / f"{TRAIN1}.partial").exists()


def test_broken_connections_are_retried_within_a_run(server, tmp_path):
    out = tmp_path / "out"
    server.cuts[TRAIN1] = [2000, 4000]  # two breaks, each after some progress
    assert run(server, out) == 0
    assert [r for r in server.requests if r[0] == TRAIN1] == [(TRAIN1, None), (TRAIN1, "bytes=2000-"),
                                                                (TRAIN1, "bytes=4000-")]
    assert (out / TRAIN1).read_bytes() == server.files[TRAIN1]


def test_server_ignoring_range_restarts_from_zero(server, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / f"{VAL}.partial").write_bytes(b"x" * 500)  # a stale prefix that must not survive the restart
    server.ignore_range = True
    assert run(server, out, num_train_shards=0) == 0
    assert server.requests == [(VAL, "bytes=500-")]
    assert (out / VAL).read_bytes() == server.files[VAL]


def test_partial_holding_the_whole_file_is_finished_off(server, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / f"{VAL}.partial").write_bytes(server.files[VAL])  # killed between the last byte and the rename
    assert run(server, out, num_train_shards=0) == 0
    assert (out / VAL).read_bytes() == server.files[VAL]


@pytest.mark.parametrize("corruption, problem", [
    (dict(magic=12345), "wrong magic 12345"),
    (dict(drop_bytes=100), "truncated by 100 bytes"),  # the server's own copy is short of its header's count
])
def test_corrupt_file_fails_naming_it(server, tmp_path, capsys, corruption, problem):
    out = tmp_path / "out"
    server.files[TRAIN1] = shard_bytes(tmp_path, 7, **corruption)
    assert run(server, out) == 1
    err = capsys.readouterr().err
    assert f"error: {TRAIN1}: not a valid shard" in err and problem in err
    assert not (out / TRAIN1).exists() and not (out / f"{TRAIN1}.partial").exists()
    assert (out / VAL).exists() and not (out / TRAIN2).exists()


def test_missing_file_fails_at_once(server, tmp_path, capsys):
    assert run(server, tmp_path / "out", num_train_shards=3) == 1
    assert "error: fineweb_train_000003.bin: HTTP 404" in capsys.readouterr().err
    assert server.requests.count(("fineweb_train_000003.bin", None)) == 1


def test_unreachable_server_fails_after_retries(tmp_path, capsys):
    with socket.socket() as s:  # a port with nobody listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = cached_fineweb10B.main(["0", "--base_url", f"http://127.0.0.1:{port}", "--out_dir", str(tmp_path)])
    assert code == 1
    assert f"error: {VAL}: download failed {cached_fineweb10B.ATTEMPTS} times in a row" in capsys.readouterr().err


def test_silent_server_times_out_says_so_at_each_retry_and_gives_up(tmp_path, capsys, monkeypatch):
    """A server that accepts the connection and never answers: each try ends at TIMEOUT (at most 30 s in the
    script) with a retry line on stderr, and the download gives up after ATTEMPTS tries."""
    assert SCRIPT_TIMEOUT <= 30
    monkeypatch.setattr(cached_fineweb10B, "TIMEOUT", 0.3)
    with socket.socket() as silent:  # the kernel completes the handshake; nobody ever reads or writes
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        code = cached_fineweb10B.main(["0", "--base_url", f"http://127.0.0.1:{port}", "--out_dir", str(tmp_path)])
    err = capsys.readouterr().err.splitlines()
    assert code == 1
    retries = [line for line in err if line.startswith(f"{VAL}: ") and "retrying in" in line]
    assert len(retries) == cached_fineweb10B.ATTEMPTS - 1 and all("timed out" in line for line in retries)
    assert f"error: {VAL}: download failed {cached_fineweb10B.ATTEMPTS} times in a row (timed out)" in err[-1]


def test_default_out_dir_is_next_to_the_script(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    script_dir = Path(cached_fineweb10B.__file__).resolve().parent
    assert cached_fineweb10B.parse_args([]).out_dir == script_dir / "fineweb10B"
