"""Hostile index folders (issue 36): a real small index made by `vitviz index`, then a copy of it damaged or hand-made
in one way per case. Each case runs in its own process, bounded in time and memory (both asserted), which opens the
index and reads everything in it; it must print exactly one IndexFormatError line that names the problem, with no
traceback, no hang and no huge allocation. The undamaged copy must open and read cleanly in the same harness, and
`vitviz index --verify` finds a changed byte that opening (which never reads the data) does not."""

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import faiss
import numpy as np
import pyarrow.parquet as pq
import pytest
from dataset_harness import ROOT, make_images
from tiny_models import tiny_checkpoint

import vitviz
from vitviz.commands.index import main
from vitviz.dataset import IndexFormatError, search
from vitviz.dataset.checks import MAX_MANIFEST_BYTES, sha256_file

SECONDS = 90  # a case's process must end within this (it opens and reads the 13-image index in about 1 s)
PEAK_BYTES = 1536 << 20  # and peak below 1.5 GB resident (torch, DuckDB and FAISS loaded take about 1 GB)
ADDRESS_SPACE = 12 << 30  # a failed guard fails fast instead of taking the machine's memory

# The cases' processes are forked from one server that imported vitviz, torch, DuckDB and FAISS once (each fork
# is a whole process of its own, bounded and measured on its own); importing them afresh per case takes seconds.
# The server reads a folder per line and answers a JSON line: the child's exit status, output, seconds and peak.
SERVER = """
import json, os, resource, sys, time
from vitviz.dataset import IndexFormatError, open_index
import duckdb, faiss, pandas  # imported before forking: the children only read
print("ready", flush=True)

def read(folder):
    index = open_index(folder)
    everything = list(range(index.count))
    index.maps(everything), index.maps(everything, "readout"), index.features(everything)
    index.embeddings(everything), index.activations(everything, 0)
    index.nearest_images(0), index.nearest_patches(0, (1, 1))
    return int(index.query("SELECT count(*) AS n FROM images")["n"][0])

for line in sys.stdin:
    folder, seconds, address_space = json.loads(line)
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
        with open(folder + ".out", "w") as out, open(folder + ".err", "w") as err:
            os.dup2(out.fileno(), 1), os.dup2(err.fileno(), 2)
        sys.stdout, sys.stderr = open(1, "w", closefd=False), open(2, "w", closefd=False)
        try:
            print("read", read(folder), "images")
            code = 0
        except IndexFormatError as error:
            print(f"IndexFormatError: {error}")
            code = 3
        except BaseException:
            import traceback
            traceback.print_exc()
            code = 1
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(code)
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done or time.monotonic() - started > seconds:
            break
        time.sleep(0.01)
    if not done:
        os.kill(pid, 9)
        _, status, usage = os.wait4(pid, 0)
    answer = {"status": os.waitstatus_to_exitcode(status), "seconds": time.monotonic() - started,
              "peak": usage.ru_maxrss * 1024, "ended": bool(done)}
    print(json.dumps(answer), flush=True)
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hostile")
    model, images, out = tiny_checkpoint(root / "model.pt"), make_images(root / "images", count=12), root / "index"
    argv = [str(images), "--model", str(model), "--out", str(out), "--shard-size", "5", "--batch-size", "5"]
    assert main([*argv, "--activations", "0"]) == 0
    return out


@pytest.fixture(scope="module")
def server():
    env = os.environ | {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [sys.executable, "-c", SERVER], env=env, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout.readline() == "ready\n"
    yield process
    process.kill()  # its interpreter's teardown (torch's) takes seconds: nothing is left to finish
    process.wait(timeout=60)


def read_in_a_process(server, folder: Path) -> tuple[int, str, str, float, int]:
    """(exit status, stdout, stderr, seconds, peak resident bytes) of a process that opens ``folder`` and reads
    everything in it; killed after SECONDS, and under an address-space limit."""
    server.stdin.write(json.dumps([str(folder), SECONDS, ADDRESS_SPACE]) + "\n")
    server.stdin.flush()
    answer = json.loads(server.stdout.readline())
    assert answer["ended"], f"reading {folder} did not end within {SECONDS} s"
    out, err = (Path(f"{folder}.{kind}").read_text() for kind in ("out", "err"))
    return answer["status"], out, err, answer["seconds"], answer["peak"]


# --- damage -----------------------------------------------------------------------------------------------------


def manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def edit(folder: Path, change) -> None:
    value = manifest(folder)
    change(value)
    (folder / "manifest.json").write_text(json.dumps(value))


def replace_file(folder: Path, shard: int, name: str, write) -> None:
    """Write a shard's file anew and record its size and checksum, as a careful forger would."""
    path = folder / "shards" / f"{shard:06d}" / name
    path.unlink()
    write(path)
    record = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
    edit(folder, lambda m: m["shards"][shard]["files"].__setitem__(name, record))


def replace_array(folder: Path, shard: int, name: str, change) -> None:
    array = np.load(folder / "shards" / f"{shard:06d}" / name)
    replace_file(folder, shard, name, lambda path: np.save(path, change(array)))


def faiss_file(folder: Path, kind: str = "images") -> Path:
    return folder / "search" / f"{kind}.faiss"


def header_claiming(folder: Path, vectors: int) -> None:
    path = faiss_file(folder)
    data = bytearray(path.read_bytes())
    data[8:16] = struct.pack("<q", vectors)  # after the fourcc and d: ntotal
    path.write_bytes(bytes(data))


def id_map_claiming(folder: Path, ids: int) -> None:
    """The IDMap2's id list (its last part: a count, then the ids) claims ``ids`` ids: 16 GB for 2^31."""
    path, count = faiss_file(folder), manifest(folder)["search"]["images"]["vectors"]
    data = bytearray(path.read_bytes())
    at = len(data) - 8 * count - 8
    assert struct.unpack_from("<q", data, at) == (count,)
    data[at : at + 8] = struct.pack("<q", ids)
    path.write_bytes(bytes(data))


def flat_index_of(folder: Path, dimension: int, vectors: int | None = None) -> None:
    count = vectors or manifest(folder)["search"]["images"]["vectors"]
    index = faiss.IndexIDMap2(faiss.IndexFlatIP(dimension))
    index.add_with_ids(np.ones((count, dimension), np.float32), np.arange(count, dtype=np.int64))
    faiss.write_index(index, str(faiss_file(folder)))


def inner_of_another_dimension(folder: Path) -> None:
    """An IDMap2 whose header is right and whose inner flat index has vectors of another width."""
    path, count = faiss_file(folder), manifest(folder)["search"]["images"]["vectors"]
    width = manifest(folder)["search"]["images"]["dimension"]
    flat_index_of(folder, width - 2, count)
    data = bytearray(path.read_bytes())
    data[4:8] = struct.pack("<i", width)  # the outer header claims the stored width
    path.write_bytes(bytes(data) + b"\0" * (count * 8))  # long enough for the stored width's size


def pickle_bomb(marker: Path):
    class Bomb:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    def write(path: Path) -> None:
        array = np.empty(5, dtype=object)
        array[:] = [Bomb()] * 5
        with open(path, "wb") as f:
            np.lib.format.write_array(f, array, allow_pickle=True)

    return write


def outside_link(folder: Path, relative: str) -> None:
    """``relative`` replaced by a symlink to a copy of it outside the index folder."""
    target = folder / relative
    copy = folder.parent / f"{folder.name}-outside-{target.name}"
    (shutil.copytree if target.is_dir() else shutil.copy)(target, copy)
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    target.symlink_to(copy)


def nested(depth: int):
    def change(m: dict) -> None:
        m["model"]["extra"] = json.loads("[" * depth + "]" * depth) if depth < 500 else None

    def write(folder: Path) -> None:
        text = (folder / "manifest.json").read_text()
        (folder / "manifest.json").write_text(text[:-1] + ', "deep": ' + "[" * depth + "]" * depth + "}")

    return change if depth < 500 else write


def rename_activations(m: dict) -> None:
    files = m["shards"][0]["files"]
    name = m["shards"][0]["activations"]["0"]
    files[name.replace("block00", "block000")] = files.pop(name)


def shard_entry(index: int, **values):
    return lambda m: m["shards"][index].update(values)


CASES = {
    # (what is done to the copy, a pattern the one line must match)
    "a shard count of 10^15": (
        lambda f: edit(f, shard_entry(0, count=10**15)),
        r"shard entry 0: count must be an integer in \[1, 5\]; it is 1000000000000000",
    ),
    "the same shard listed twice": (
        lambda f: edit(f, lambda m: m["shards"].append(dict(m["shards"][0]))),
        r"shard 000000 is listed twice",
    ),
    "a 10^9 x 10^9 grid": (
        lambda f: edit(f, lambda m: (m.__setitem__("grid", [10**9] * 2), m["layout"].__setitem__("grid", [10**9] * 2))),
        r"grid 1000000000x1000000000 is not the 4x4 patch grid of a 32x32 input",
    ),
    "a 10^9 x 10^9 grid with a matching input size": (
        lambda f: edit(
            f,
            lambda m: (
                m.__setitem__("grid", [10**9] * 2),
                m["layout"].update(grid=[10**9] * 2, input_size=[8 * 10**9] * 2),
            ),
        ),
        r"layout.input_size must be an integer in \[1, 16,384\]; it is 8000000000",
    ),
    "a grid of strings": (
        lambda f: edit(f, lambda m: (m.__setitem__("grid", ["4", "4"]), m["layout"].__setitem__("grid", ["4", "4"]))),
        r"grid must be two integers \[rows, cols\]; it is \['4', '4'\]",
    ),
    "a rollout.npy of another shape": (
        lambda f: replace_file(f, 0, "rollout.npy", lambda p: np.save(p, np.zeros((5, 5, 5), np.float16))),
        r"000000/rollout.npy: has shape \(5, 5, 5\), the manifest's layout says \(5, 4, 4\)",
    ),
    "a rollout.npy replaced without its size recorded": (
        lambda f: np.save(f / "shards/000001/rollout.npy", np.zeros((5, 8, 8), np.float16)),
        r"000001/rollout.npy: is 768 bytes, the manifest records 288",
    ),
    "a rollout.npy in Fortran order": (
        lambda f: replace_array(f, 0, "rollout.npy", np.asfortranarray),
        r"rollout.npy: holds Fortran-ordered float16 values",
    ),
    "a rollout.npy of float64": (
        lambda f: replace_array(f, 0, "rollout.npy", lambda a: a.astype(np.float64)),
        r"rollout.npy: holds float64 values; the index stores float16",
    ),
    "a truncated rollout.npy": (
        lambda f: replace_file(f, 2, "rollout.npy", lambda p: p.write_bytes(np.lib.format.magic(1, 0) + b"\x10")),
        r"000002/rollout.npy: is not a readable .npy array",
    ),
    "an images.parquet of another shard": (
        lambda f: replace_file(
            f,
            2,
            "images.parquet",
            lambda p: pq.write_table(pq.read_table(p.parent.parent / "000000/images.parquet"), p),
        ),
        r"000002/images.parquet: holds 5 rows, the manifest says the shard has 3 images",
    ),
    "a garbage images.parquet": (
        lambda f: replace_file(f, 1, "images.parquet", lambda p: p.write_bytes(b"PAR1" + b"x" * 100)),
        r"000001/images.parquet: is not a readable Parquet file",
    ),
    "garbage in search/images.faiss": (
        lambda f: faiss_file(f).write_bytes(os.urandom(4096)),
        r"images.faiss is not a FAISS index this vitviz writes \(an unknown header\)",
    ),
    "garbage after a right header in search/images.faiss": (
        lambda f: faiss_file(f).write_bytes(faiss_file(f).read_bytes()[:37] + b"\xff" * 4096),
        r"images.faiss is not a readable FAISS index \(",
    ),
    "a truncated search/images.faiss": (
        lambda f: faiss_file(f).write_bytes(faiss_file(f).read_bytes()[:200]),
        r"images.faiss is 200 bytes, too short for 12 vectors",
    ),
    "a truncated end of search/patches.faiss": (
        lambda f: faiss_file(f, "patches").write_bytes(faiss_file(f, "patches").read_bytes()[:-40]),
        r"patches.faiss is not a readable FAISS index \(",
    ),
    "an empty search/images.faiss": (
        lambda f: faiss_file(f).write_bytes(b""),
        r"images.faiss is not a FAISS index this vitviz writes \(empty\)",
    ),
    "a search/images.faiss claiming 2^62 vectors": (
        lambda f: header_claiming(f, 1 << 62),
        r"images.faiss holds 4611686018427387904 vectors of dimension 32, the index stores 12",
    ),
    "a search/images.faiss whose id list claims 2^31 ids": (
        lambda f: id_map_claiming(f, 1 << 31),
        r"images.faiss is not a readable FAISS index \(.*deserialization_vector_byte_limit",
    ),
    "a search/images.faiss of another dimension": (
        lambda f: flat_index_of(f, 7),
        r"images.faiss holds 12 vectors of dimension 7, the index stores 12 of dimension 32",
    ),
    "a search/images.faiss whose inner index has another dimension": (
        inner_of_another_dimension,
        r"images.faiss holds vectors of dimension 32 and count 12 \(\[\(30, 12\)\] inside\)",
    ),
    "a manifest claiming 2^62 search vectors": (
        lambda f: edit(f, lambda m: m["search"]["images"].__setitem__("vectors", 1 << 62)),
        r"search.images: vectors must be an integer in \[1, 13\]",
    ),
    "a manifest nested 100 deep": (
        lambda f: edit(f, nested(100)),
        r"manifest.json: nests lists or objects more than 64 deep",
    ),
    "a manifest nested 100,000 deep": (
        nested(100_000),
        r"manifest.json: nests lists or objects thousands deep",
    ),
    "an oversized manifest": (
        lambda f: (f / "manifest.json").write_text((f / "manifest.json").read_text() + " " * MAX_MANIFEST_BYTES),
        r"manifest.json: is [\d,]+ bytes, more than a manifest's 16,777,216",
    ),
    "a huge JSON string": (
        lambda f: edit(f, lambda m: m["model"].__setitem__("spec", "x" * 3_000_000)),
        r"manifest.json: holds a string of 3,000,000 characters",
    ),
    "an integer of 5,000 digits": (
        lambda f: (f / "manifest.json").write_text(
            (f / "manifest.json").read_text()[:-1] + ', "n": ' + "9" * 5000 + "}"
        ),
        r"manifest.json: is not valid JSON \(Exceeds the limit",
    ),
    "a shard named ../../outside": (
        lambda f: edit(f, shard_entry(0, name="../../outside")),
        r"shard entry 0: its name '../../outside' is not a plain folder name",
    ),
    "a shard named by an absolute path": (
        lambda f: edit(f, shard_entry(1, name="/etc")),
        r"shard entry 1: its name '/etc' is not a plain folder name",
    ),
    "a file named by a path": (
        lambda f: edit(
            f, lambda m: m["shards"][0]["files"].__setitem__("../../manifest.json", {"sha256": "0" * 64, "bytes": 1})
        ),
        r"shard entry 0: file name '../../manifest.json' is not a plain file name",
    ),
    "a negative start": (
        lambda f: edit(f, shard_entry(0, start=-5)),
        r"shard entry 0: start must be an integer in \[0,",
    ),
    "a bool instead of an int": (
        lambda f: edit(f, shard_entry(0, start=False)),
        r"shard entry 0: start must be an integer in \[0, [\d,]+\]; it is False",
    ),
    "overlapping shards": (
        lambda f: edit(f, shard_entry(1, start=4)),
        r"shard 000001 starts at 4 and overlaps the shard before it",
    ),
    "a gap between shards": (
        lambda f: edit(f, lambda m: m["shards"].pop(1)),
        r"shard 000002 starts at 10 and leaves images \[5, 10\) in no shard",
    ),
    "a missing shard folder": (
        lambda f: shutil.rmtree(f / "shards/000001"),
        r"shards/000001: is missing",
    ),
    "a file replaced by a folder": (
        lambda f: ((f / "shards/000000/readout.npy").unlink(), (f / "shards/000000/readout.npy").mkdir()),
        r"000000/readout.npy: is not a regular file",
    ),
    "an array the manifest does not list": (
        lambda f: edit(f, lambda m: m["shards"][0]["files"].pop("embedding.npy")),
        r"000000: the manifest's files for this shard are not the index's \(missing: embedding.npy\)",
    ),
    "an activation file named block000": (
        lambda f: edit(f, rename_activations),
        r"000000: the manifest's files for this shard are not the index's \(missing: activations-block00; "
        r"not of this index: activations-block000\.",
    ),
    "a manifest in another encoding": (
        lambda f: (f / "manifest.json").write_bytes((f / "manifest.json").read_text().encode("utf-16")),
        r"manifest.json: is not valid JSON \('utf-8' codec can't decode",
    ),
    "a manifest that is a named pipe": (
        lambda f: ((f / "manifest.json").unlink(), os.mkfifo(f / "manifest.json")),
        r"manifest.json: is not a regular file",
    ),
    "an images.parquet that is a named pipe": (
        lambda f: ((f / "shards/000002/images.parquet").unlink(), os.mkfifo(f / "shards/000002/images.parquet")),
        r"000002/images.parquet: is not a regular file",
    ),
    "a symlink to an array outside the folder": (
        lambda f: outside_link(f, "shards/000000/rollout.npy"),
        r"000000/rollout.npy: is a symlink to a place outside the index folder",
    ),
    "a symlinked shard folder outside": (
        lambda f: outside_link(f, "shards/000002"),
        r"shards/000002: is a symlink to a place outside the index folder",
    ),
    "a symlinked manifest outside": (
        lambda f: outside_link(f, "manifest.json"),
        r"manifest.json: is a symlink to a place outside the index folder",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_a_hostile_folder_gets_one_index_format_error_line(built, server, tmp_path, case):
    damage, message = CASES[case]
    folder = tmp_path / "index"
    shutil.copytree(built, folder, symlinks=True)
    damage(folder)
    status, out, err, seconds, peak = read_in_a_process(server, folder)
    assert seconds < SECONDS and peak < PEAK_BYTES, (seconds, peak)
    lines = out.splitlines()
    assert (status, len(lines)) == (3, 1), (status, out, err)
    assert "Traceback" not in err, err
    assert lines[0].startswith("IndexFormatError: "), lines
    assert re.search(message, lines[0]), lines[0]


def test_a_pickled_object_array_is_never_loaded(built, server, tmp_path):
    folder, marker = tmp_path / "index", tmp_path / "unpickled"
    shutil.copytree(built, folder)
    replace_file(folder, 1, "embedding.npy", pickle_bomb(marker))
    status, out, err, seconds, peak = read_in_a_process(server, folder)
    assert seconds < SECONDS and peak < PEAK_BYTES, (seconds, peak)
    assert status == 3 and re.fullmatch(r"IndexFormatError: .*000001/embedding.npy: holds object values.*\n", out)
    assert not marker.exists(), "the pickled array was loaded"


def test_the_undamaged_index_reads_cleanly_in_the_same_harness(built, server, tmp_path):
    folder = tmp_path / "index"
    shutil.copytree(built, folder)
    status, out, err, seconds, peak = read_in_a_process(server, folder)
    assert (status, out) == (0, "read 13 images\n"), (status, out, err)
    assert seconds < SECONDS and peak < PEAK_BYTES, (seconds, peak)


def test_verify_checks_every_checksum_that_opening_does_not(built, server, tmp_path, capsys):
    folder = tmp_path / "index"
    shutil.copytree(built, folder)
    assert main(["--verify", str(folder)]) == 0
    assert capsys.readouterr().out.endswith("3 shards, 21 files and 13 images verified\n")
    for shard, name in ((0, "features.npy"), (2, "heads.parquet")):
        path = folder / "shards" / f"{shard:06d}" / name
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF  # a changed byte in the data: the same size, header and footer
        path.write_bytes(bytes(data))
    status, out, _, _, _ = read_in_a_process(server, folder)
    assert (status, out) == (0, "read 13 images\n")  # opening checks sizes and headers, never the data
    assert main(["--verify", str(folder)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"error: {folder}/shards/000000/features.npy: does not match its checksum: the index is damaged",
        f"error: {folder}/shards/000002/heads.parquet: does not match its checksum: the index is damaged",
    ]


def test_verify_reports_an_unreadable_index_in_one_line(built, tmp_path, capsys):
    folder = tmp_path / "index"
    shutil.copytree(built, folder)
    header_claiming(folder, 1 << 62)
    assert main(["--verify", str(folder)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"error: {folder}/search/images.faiss holds 4611686018427387904 vectors of dimension 32, the index stores "
        "12 of dimension 32; index the dataset again"
    ]


def test_an_ivf_index_loads_checked_and_refuses_another_count(tmp_path):
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(800, 8)).astype(np.float32)

    def chunks():
        yield np.arange(800), vectors

    index, measured = search.build_vector_index(chunks, 800, 8, exact_limit=100)
    assert measured["kind"] == "ivf"
    search.save(index, tmp_path / "ivf.faiss")
    loaded = search.load(tmp_path / "ivf.faiss", 8, 800)
    assert (loaded.d, loaded.ntotal, loaded.nlist) == (8, 800, index.nlist)
    with pytest.raises(IndexFormatError, match="holds 800 vectors of dimension 8, the index stores 799"):
        search.load(tmp_path / "ivf.faiss", 8, 799)


def test_the_page_opens_only_what_resolves_inside_its_folders(built, tmp_path, monkeypatch):
    """The Dataset page's guard decides on the resolved path: a link to an index outside the allowed folders is
    refused unopened, and an index inside whose shard links out gets the library's one line."""
    from vitviz_dashboard.dataset import opening

    allowed, outside = tmp_path.resolve() / "allowed", tmp_path.resolve() / "outside"
    allowed.mkdir()
    shutil.copytree(built, outside)
    shutil.copytree(built, allowed / "index")
    (allowed / "link").symlink_to(outside)
    outside_link(allowed / "index", "shards/000001")
    monkeypatch.setenv("VITVIZ_MODEL_DIRS", str(allowed))
    shown = []
    monkeypatch.setattr(opening.st, "error", shown.append)
    opened = []
    monkeypatch.setattr(
        opening, "cached_index", lambda folder, stamp: opened.append(folder) or vitviz.open_index(folder)
    )
    assert opening.open_typed_index(str(allowed / "link")) is None
    assert (shown, opened) == ([opening.OUTSIDE], [])
    assert opening.open_typed_index(str(allowed / "index")) is None
    assert opened == [str(allowed / "index")]
    assert re.fullmatch(
        r"Could not open the index: .*000001: is a symlink to a place outside the index folder.*", shown[1]
    )
    (allowed / "index" / "shards" / "000001").unlink()
    shutil.copytree(built / "shards" / "000001", allowed / "index" / "shards" / "000001")
    assert opening.open_typed_index(str(allowed / "index" / ".." / "index")).folder == allowed / "index"
