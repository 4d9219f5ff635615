"""Reading an index: ``vitviz.open_index(DIR)``.

SQL goes to DuckDB over views of the index's own Parquet files, read-only: one SELECT per call, with the external
access that DuckDB allows limited to the index folder and the settings locked, so COPY, ATTACH, INSTALL and
reading any other file are refused. Results come a page at a time. Each query is bounded in time and memory and runs
in a query process of its own (vitviz/dataset/bounds.py, sandbox.py); a query stopped by a limit raises
QueryStopped, which names the limit. Arrays are memory-mapped per shard and only
the requested rows are read. Tags on images (``index.tag``) are kept beside the index, in a file of their own
(vitviz/dataset/tags.py), and queried as the table ``tags``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from vitviz.dataset import checks, sandbox, search
from vitviz.dataset import tags as tagging
from vitviz.dataset.bounds import (
    QueryBusy,
    QueryError,
    QuerySession,
    QueryStopped,
    RunningQuery,
    limits_from_environment,
    server_slots,
)
from vitviz.dataset.storage import ACTIVATIONS, SHARDS, IndexFormatError, activation_name, read_manifest

if TYPE_CHECKING:
    import pandas as pd

PAGE = 10_000  # rows a query returns unless asked for another page size
MAX_SQL = 100_000  # characters of SQL read


def check_activations(index: DatasetIndex, block: int, error: type[Exception] = ValueError, reader: str = "") -> None:
    """Raises ``error`` (after ``reader``'s words, which say who needs the block) when ``index`` stores no
    activations of block ``block``, with the blocks it does store and the command that would store it."""
    if block not in index.activation_blocks:
        stored = index.activation_blocks
        has = f"it stores only those of blocks {stored}" if stored else "it stores none"
        spec = index.manifest.get("model", {}).get("spec") or "MODEL"
        raise error(
            f"{reader}{index.folder} stores no activations of block {block} ({has}): index the dataset again with "
            f"`vitviz index SOURCE --model {spec} --out DIR --activations {block}`"
        )


class DatasetIndex:
    """An index folder made by `vitviz index`. Open with ``vitviz.open_index(DIR)``; ``query_seconds`` and
    ``query_memory`` (MB) bound each query (by default the server's settings, else 20 s and 1024 MB)."""

    def __init__(self, folder: str | Path, query_seconds: float | None = None, query_memory: int | None = None):
        self.limits = limits_from_environment(query_seconds, query_memory)
        self._running: set[RunningQuery] = set()
        self.folder = Path(folder).expanduser().resolve()
        self.manifest = read_manifest(self.folder)  # every field checked (checks.py)
        if not self.manifest["complete"]:
            raise IndexFormatError(
                f"{self.folder} is an unfinished index (the run stopped before its end); "
                "finish it with `vitviz index ... --resume`"
            )
        if not self.manifest["shards"]:
            raise IndexFormatError(f"{self.folder} lists no shards: the manifest was edited; index the dataset again")
        self.layout = self.manifest["layout"]
        self.shards = sorted(self.manifest["shards"], key=lambda s: s["start"])
        self._starts = np.array([s["start"] for s in self.shards])
        self._mapped: dict[tuple[str, str], np.ndarray] = {}
        # every file inside the folder, of its recorded size, each array's header against the layout (not the data)
        self._arrays = checks.check_files(self.folder, self.manifest)

    def __repr__(self) -> str:
        return f"DatasetIndex({str(self.folder)!r}, {self.count} images, model {self.manifest['model'].get('spec')!r})"

    @property
    def count(self) -> int:
        return sum(s["count"] for s in self.shards)

    @property
    def grid(self) -> tuple[int, int]:
        return tuple(self.layout["grid"])

    # --- SQL -----------------------------------------------------------------------------------------------------

    def _files(self, table: str) -> list[str]:
        return [str(self.folder / SHARDS / s["name"] / f"{table}.parquet") for s in self.shards]

    @cached_property
    def _connection(self):
        """An empty DuckDB connection of this process that only parses (the queries run in a query process): small,
        single-threaded, no external access, its settings locked."""
        import duckdb

        connection = duckdb.connect(":memory:", config={"memory_limit": "64MB", "threads": 1})
        connection.execute("SET enable_external_access = false")
        connection.execute("SET autoinstall_known_extensions = false")
        connection.execute("SET autoload_known_extensions = false")
        connection.execute("SET lock_configuration = true")
        return connection

    def query(self, sql: str, limit: int = PAGE, offset: int = 0, session: QuerySession | None = None) -> pd.DataFrame:
        """One SELECT over the tables ``images``, ``heads`` and ``tags`` (image_id, tag; see ``tag``): rows
        [offset, offset + limit) of its result.
        ``df.attrs["more"]`` says whether rows follow; ask for them with ``offset``.

        The query may take ``self.limits`` (seconds, MB); past either it is stopped with ``QueryStopped``, whose
        message names the limit. With a ``session``, a second query while one of the session's runs is refused
        (``QueryBusy``) and ``session.stop()`` stops it; ``self.stop()`` stops every running query of this index.
        At most VITVIZ_QUERY_SLOTS queries (4) run at once in the process; others wait for a slot, up to the time
        limit."""
        if limit < 1 or offset < 0:
            raise QueryError(f"limit must be at least 1 and offset at least 0; got limit={limit}, offset={offset}")
        statement = self._one_select(sql)
        limits = self.limits
        views = {table: self._files(table) for table in ("images", "heads")}
        request = sandbox.query_request(views, self.folder / SHARDS, statement, limit, offset, limits)
        request["tags"] = tagging.sql_source(self.folder)  # the tags file beside the index, read-only like the rest
        running = session.begin() if session is not None else RunningQuery()
        size, slots = server_slots()
        try:
            if not slots.acquire(timeout=limits.seconds):
                raise QueryBusy(f"the server runs {size} queries at once, its most (VITVIZ_QUERY_SLOTS); try again")
            self._running.add(running)
            try:
                if running.stop_requested.is_set():
                    raise QueryStopped("the query was stopped (Stop was pressed)", "stop")
                frame = sandbox.run_query(request, limits, running, keep=size)
            finally:
                self._running.discard(running)
                slots.release()
        finally:
            if session is not None:
                session.end(running)
        more = len(frame) > limit
        frame = frame.iloc[:limit]
        frame.attrs["more"], frame.attrs["offset"] = more, offset
        return frame

    def stop(self) -> int:
        """Stop every query of this index now running (each raises QueryStopped); how many there were."""
        running = list(self._running)
        for query in running:
            query.stop()
        return len(running)

    def _one_select(self, sql: str) -> str:
        import duckdb

        if len(sql) > MAX_SQL:
            raise QueryError(f"the query is {len(sql):,} characters long; at most {MAX_SQL:,} are read")
        parser = self._connection.cursor()  # a cursor per call: sessions share the index, and so its connection
        try:
            statements = parser.extract_statements(sql)
        except duckdb.Error as error:
            raise QueryError(f"the query does not parse: {sandbox.one_line(error)}") from None
        finally:
            parser.close()
        if len(statements) != 1:
            raise QueryError(f"give exactly one SELECT statement; got {len(statements)}")
        kind = statements[0].type
        if kind != duckdb.StatementType.SELECT:
            name = str(kind).rsplit(".", 1)[-1]
            raise QueryError(
                f"only SELECT queries are allowed: the index is read-only ({name} is refused; "
                "COPY, ATTACH, INSTALL, SET, CREATE and the like cannot run here)"
            )
        return statements[0].query.rstrip().rstrip(";")

    def images(self, limit: int = PAGE, offset: int = 0) -> pd.DataFrame:
        """The images table, a page at a time."""
        return self.query("SELECT * FROM images ORDER BY image_id", limit, offset)

    # --- tags (beside the index, never in its checksummed files: vitviz/dataset/tags.py) ---------------------------

    def _ids(self, image_ids: Sequence[int] | int) -> list[int]:
        ids = np.atleast_1d(np.asarray(image_ids, dtype=np.int64))
        if ids.ndim != 1 or ((ids < 0) | (ids >= self.count)).any():
            raise ValueError(f"image ids must be in [0, {self.count - 1}]; got {np.asarray(image_ids).tolist()[:20]}")
        return ids.tolist()

    def tag(self, image_ids: Sequence[int] | int, tag: str) -> int:
        """Tag these images with ``tag`` (1 to 64 letters, digits and _ . : + -), kept in DIR/tags.parquet; how many
        were newly tagged. Sessions tagging at once each keep their tags (a lock around each change)."""
        return tagging.add_tag(self.folder, self._ids(image_ids), tag)

    def untag(self, image_ids: Sequence[int] | int, tag: str) -> int:
        """Take ``tag`` off these images; how many had it."""
        return tagging.remove_tag(self.folder, self._ids(image_ids), tag)

    def tags(self, image_ids: Sequence[int] | int | None = None) -> pd.DataFrame:
        """Every (image_id, tag), sorted by tag then image, or those of these images; SQL sees them as ``tags``."""
        frame = tagging.read_tags(self.folder)
        if image_ids is not None:
            frame = frame[frame["image_id"].isin(self._ids(image_ids))].reset_index(drop=True)
        return frame

    # --- arrays ----------------------------------------------------------------------------------------------------

    def _array(self, shard: dict, name: str) -> np.ndarray:
        key = (shard["name"], name)
        if key not in self._mapped:
            if name.startswith(ACTIVATIONS):  # content-hash named: the shard's record says which file
                block = str(int(name.removeprefix(ACTIVATIONS)))
                path = self.folder / SHARDS / shard["name"] / shard.get("activations", {}).get(block, "-")
            else:
                path = self.folder / SHARDS / shard["name"] / f"{name}.npy"
            if name not in self._arrays or not path.is_file():
                stored = sorted({f.removesuffix(".npy") for s in self.shards for f in s["files"] if f.endswith(".npy")})
                raise ValueError(f"this index stores no {name!r} arrays; it has {', '.join(stored)}")
            array = np.load(path, mmap_mode="r", allow_pickle=False)
            shape, dtype = self._arrays[name]
            if array.shape != (shard["count"], *shape) or array.dtype != dtype:  # replaced since it was opened
                raise IndexFormatError(f"{path} changed since the index was opened: {array.shape} {array.dtype}")
            self._mapped[key] = array
        return self._mapped[key]

    def _rows(self, image_ids: Sequence[int] | int, name: str) -> np.ndarray:
        """The rows of array ``name`` for these images, in their order, as fp32 (only these rows are read)."""
        ids = np.atleast_1d(np.asarray(image_ids, dtype=np.int64))
        if ids.ndim != 1 or ((ids < 0) | (ids >= self.count)).any():
            raise ValueError(f"image ids must be in [0, {self.count - 1}]; got {np.asarray(image_ids).tolist()}")
        which = np.searchsorted(self._starts, ids, side="right") - 1
        first = self._array(self.shards[0], name)
        out = np.empty((len(ids), *first.shape[1:]), np.float32)
        for shard_index in np.unique(which):
            shard, mask = self.shards[shard_index], which == shard_index
            out[mask] = self._array(shard, name)[ids[mask] - shard["start"]]
        return out

    def maps(self, image_ids: Sequence[int] | int, kind: str = "rollout") -> np.ndarray:
        """Stored maps (n, rows, cols): "rollout", "readout" (the last block's heads averaged), "readout:<head>",
        or "relevance" (indexed with --relevance)."""
        if kind == "readout" or kind.startswith("readout:"):
            per_head = self._rows(image_ids, "readout")  # (n, heads, rows, cols)
            if kind == "readout":
                return per_head.mean(axis=1)
            head = _head_number(kind, per_head.shape[1])
            return per_head[:, head]
        if kind not in ("rollout", "relevance"):
            raise ValueError(f"map kind must be 'rollout', 'readout', 'readout:<head>' or 'relevance'; got {kind!r}")
        return self._rows(image_ids, kind)

    def features(self, image_ids: Sequence[int] | int) -> np.ndarray:
        """Stored patch features (n, rows, cols, D), fp32 from the fp16 store."""
        return self._rows(image_ids, "features")

    def embeddings(self, image_ids: Sequence[int] | int) -> np.ndarray:
        """Pooled embeddings (n, D)."""
        return self._rows(image_ids, "embedding")

    @property
    def activation_blocks(self) -> list[int]:
        """The blocks whose output tokens are stored (``vitviz index ... --activations B``), 0-based."""
        return list(self.manifest.get("activations", {}).get("blocks", []))

    def activations(self, image_ids: Sequence[int] | int, block: int) -> np.ndarray:
        """Block ``block``'s output tokens (n, T, D) for these images, fp32 from the fp16 store: prefix tokens first
        (``manifest["activations"]["prefix_tokens"]`` of them), then the patches in row-major order."""
        check_activations(self, block)
        return self._rows(image_ids, activation_name(block))

    def activation_shards(self, block: int) -> list[tuple[dict, np.ndarray]]:
        """(shard record, its memory-mapped fp16 activations (count, T, D)) per shard, in image order: nothing is
        read until rows are sliced, so a pass over them reads the files sequentially."""
        check_activations(self, block)
        return [(shard, self._array(shard, activation_name(block))) for shard in self.shards]

    # --- search ---------------------------------------------------------------------------------------------------

    def _search_index(self, kind: str):
        info = self.manifest.get("search", {}).get(kind)
        if info is None:
            raise ValueError(f"this index has no {kind} search index (it was made without one)")
        cache = self.__dict__.setdefault("_search", {})
        if kind not in cache:
            # dimension and vectors: checked against the stored arrays on opening, the file's against them here
            cache[kind] = search.load(self.folder / search.SEARCH / f"{kind}.faiss", info["dimension"], info["vectors"])
        return cache[kind], info

    def nearest_patches(
        self, image_id: int, patch: tuple[int, int], k: int = 10, other_images: bool = False
    ) -> pd.DataFrame:
        """The k stored patches most like patch (row, col) of ``image_id``, best first (itself included, unless
        ``other_images``: then the image's own patches are left out and FAISS is asked for k more than one image's
        patches, so k others still come back when the index holds them): DataFrame(image_id, row, col, similarity),
        similarity the cosine of the stored features."""
        rows, cols = self.grid
        row, col = patch
        if not (0 <= row < rows and 0 <= col < cols):
            raise ValueError(f"patch ({row}, {col}) is outside the {rows}x{cols} grid")
        query = self.features(image_id)[0, row, col]
        index, info = self._search_index("patches")
        asked = min(k + rows * cols, index.ntotal) if other_images else k  # at most rows*cols of them its own
        similarity, ids = search.search(index, query, asked, info.get("nprobe"))
        import pandas as pd

        image, position = np.divmod(ids, rows * cols)
        if other_images:
            keep = np.flatnonzero(image != image_id)[:k]
            similarity, image, position = similarity[keep], image[keep], position[keep]
        return pd.DataFrame(
            {"image_id": image, "row": position // cols, "col": position % cols, "similarity": similarity}
        )

    def nearest_images(self, image_id: int, k: int = 10) -> pd.DataFrame:
        """The k images whose pooled embeddings are most like this one's, best first (itself included):
        DataFrame(image_id, similarity)."""
        query = self.embeddings(image_id)[0]
        index, info = self._search_index("images")
        similarity, ids = search.search(index, query, k, info.get("nprobe"))
        import pandas as pd

        return pd.DataFrame({"image_id": ids, "similarity": similarity})


def _head_number(kind: str, heads: int) -> int:
    text = kind.split(":", 1)[1]
    if not text.isdigit() or not 0 <= int(text) < heads:
        raise ValueError(f"map kind {kind!r}: the head must be a number in [0, {heads - 1}]")
    return int(text)


def open_index(folder: str | Path, query_seconds: float | None = None, query_memory: int | None = None) -> DatasetIndex:
    """Open an index made by `vitviz index` (see docs/dataset-index.md). Problems with the folder raise
    ``IndexFormatError`` (a ValueError) with what to do. Each query may take ``query_seconds`` of wall-clock time and
    ``query_memory`` MB (by default the server's settings VITVIZ_QUERY_SECONDS and VITVIZ_QUERY_MEMORY_MB, else 20 s
    and 1024 MB); past either it is stopped with ``QueryStopped``."""
    return DatasetIndex(folder, query_seconds, query_memory)


__all__ = ["DatasetIndex", "IndexFormatError", "QueryError", "QueryStopped", "open_index"]
