"""Download the GPT-2-tokenized FineWeb10B shards (100M tokens each) into data/fineweb10B/.

    python data/cached_fineweb10B.py 8     the val shard and train shards 1..8 (of 103)

Needs only the standard library and tqdm. An interrupted download resumes from <name>.partial on the next
run; a file gets its final name only once it has been checked to be a complete shard.
"""
import argparse
import http.client
import re
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tqdm import tqdm

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the repo root, for the shard check shared with training
from train_gpt import ShardError, shard_token_count  # noqa: E402

BASE_URL = "https://huggingface.co/datasets/kjj0/fineweb10B-gpt2/resolve/main"
ATTEMPTS = 4  # tries in a row that bring no new bytes before giving up on a file
BACKOFF = 2.0  # seconds before the first retry, doubled for each further one
TIMEOUT = 20  # seconds of silence before a connection counts as broken: a silent server fails within ~90 s
CHUNK = 1 << 20


class DownloadError(Exception):
    pass


def expected_size(response, start):
    """The whole file's size in bytes (None if the server does not say)."""
    if response.status == 206:
        content_range = response.headers.get("Content-Range", "")
        match = re.fullmatch(r"bytes (\d+)-\d+/(\d+)", content_range)
        if not match or int(match[1]) != start:
            raise DownloadError(f"asked for bytes from {start} on, got Content-Range {content_range!r}")
        return int(match[2])
    length = response.headers.get("Content-Length")
    return int(length) if length else None


def transfer(url, partial):
    """Bring `partial` up to the whole file at `url`, resuming from its current size."""
    start = partial.stat().st_size if partial.exists() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={start}-"} if start else {})
    try:
        response = urllib.request.urlopen(request, timeout=TIMEOUT)
    except urllib.error.HTTPError as e:
        if e.code == 416 and start:  # nothing past `start`: an earlier run got every byte but stopped before the rename
            return
        raise
    with response:
        if response.status != 206:
            start = 0  # the server ignored the Range header and sends the whole file
        total = expected_size(response, start)
        with open(partial, "r+b" if start else "wb") as f, tqdm(
            desc=partial.name.removesuffix(".partial"), total=total, initial=start, unit="B", unit_scale=True,
            unit_divisor=1024,
        ) as bar:
            f.seek(start)
            while chunk := response.read(CHUNK):
                f.write(chunk)
                bar.update(len(chunk))
            size = f.tell()
    # http.client ends a body that stops short of Content-Length quietly, so count the bytes here
    if total is not None and size < total:
        raise ConnectionError(f"connection closed after {size} of {total} bytes")


def download(url, path):
    """Download `url` to `path` via `path`.partial, retrying broken connections; then validate and rename."""
    partial = path.with_name(path.name + ".partial")
    failures = 0
    while True:
        before = partial.stat().st_size if partial.exists() else 0
        try:
            transfer(url, partial)
            break
        except urllib.error.HTTPError as e:
            if e.code < 500 and e.code != 429:  # the request itself is wrong: asking again will not help
                raise DownloadError(f"HTTP {e.code} {e.reason} from {url}") from None
            error = e
        except (OSError, http.client.HTTPException) as e:  # connection refused, reset, timed out, cut short
            error = e
        # a try that brought new bytes starts a fresh count: a slow, flaky link still finishes
        failures = 1 if partial.exists() and partial.stat().st_size > before else failures + 1
        if failures >= ATTEMPTS:
            kept = f"; run again to resume from {partial}" if partial.exists() else ""
            raise DownloadError(f"download failed {ATTEMPTS} times in a row ({error}){kept}")
        delay = BACKOFF * 2 ** (failures - 1)
        print(f"{path.name}: {error}; retrying in {delay:g}s", file=sys.stderr)
        time.sleep(delay)
    try:
        shard_token_count(partial)
    except ShardError as e:
        # The server said the file was complete, so it is bad at the source or was mangled on the way: it is
        # no prefix of a good file, and resuming it would fail the same way on every later run.
        partial.unlink()
        raise DownloadError(f"not a valid shard, removed it ({e})") from None
    partial.replace(path)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # 8 x 100M tokens covers the record run's ~0.67B training tokens
    parser.add_argument("num_train_shards", type=int, nargs="?", default=8, help="train shards (default 8)")
    parser.add_argument("--base_url", default=BASE_URL)
    parser.add_argument("--out_dir", type=Path, default=HERE / "fineweb10B")
    args = parser.parse_args(argv)
    if args.num_train_shards < 0:
        parser.error("num_train_shards must be 0 or more")
    return args


def main(argv=None):
    args = parse_args(argv)
    names = ["fineweb_val_000000.bin"] + [f"fineweb_train_{i:06d}.bin" for i in range(1, args.num_train_shards + 1)]
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        path = args.out_dir / name
        if path.exists():
            try:
                shard_token_count(path)
                continue
            except ShardError as e:  # the download replaces it only once a good copy is in hand
                print(f"{e}; downloading it again", file=sys.stderr)
        try:
            download(f"{args.base_url.rstrip('/')}/{name}", path)
        except DownloadError as e:
            print(f"error: {name}: {e}", file=sys.stderr)
            return 1
    print(f"{len(names)} shards ready in {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
