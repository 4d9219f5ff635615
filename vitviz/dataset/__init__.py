"""The dataset index: one pass of a model over a whole dataset, stored so that any analyst can query it.

    sources.py    where the images come from: a folder (class sub-folders give labels), a zip, a CSV/Parquet of
                  paths, a Hugging Face dataset (saved to disk, or streamed from the Hub)
    indexing.py   the pass: batches through the model once, and what is kept of each image
    checks.py     what an index folder must pass before it is trusted: the manifest's size, nesting and fields, every
                  file inside the folder with the size, shape and dtype the layout gives (headers only); checksums
                  on request (`vitviz index --verify DIR`)
    storage.py    the layout on disk: Parquet tables and .npy arrays in atomic shards (block activations in files named
                  by their content's hash), the manifest, the lock
    build.py      one run: lock, resume checks, this process's share of the shards, the manifest, the search
    search.py     FAISS indexes over patch features and pooled embeddings, exact or IVF with measured recall
    index.py      reading it back: ``open_index(DIR)``, read-only SQL (DuckDB), maps, features, activations, neighbours
    bounds.py     the bounds of each SQL query: time and memory limits (server settings), one running query per
                  session, a cap on queries at once, QueryStopped naming the limit
    sandbox.py    the query processes that run the SQL, watched for memory and time and ended past the limits
    sandbox_child.py  a query process itself: DuckDB with its limits set and locked, a timer that interrupts it
    tags.py       tags on images, kept beside the index (DIR/tags.parquet, never checksummed): changed under a lock,
                  written atomically, queried as the table ``tags``
    saved_views.py  named views of the Dataset page beside the index (DIR/views.json), every field checked on reading
    subset.py     a sub-index: chosen images' rows and arrays written as an index of their own (parent ids kept)
    photos.py     the photos behind an index, read back from its source
    analysis.py   statistics over an index: bootstrap intervals and their settling, head clusters, the joint
                  query/key embedding (AttentionViz), confusion matrices, per-class mean maps, the embeddings
                  by PCA or t-SNE, accuracy by slice of one or two columns with Wilson intervals, each image's
                  largest code of a feature (an SAE latent)
    compare.py    two indexes of the same images (two models) matched by sha256: agreement, disagreements
    views.py      what the Dataset page's views compute from an index, one call each: the confusion counts, a
                  class's mean map, the embedding map's sample, the heads table's means and a sample per image

The layout, with every stored item and its units, is in docs/dataset-index.md.
"""

from vitviz.dataset.bounds import QueryBusy, QuerySession, QueryStopped
from vitviz.dataset.index import DatasetIndex, QueryError, open_index
from vitviz.dataset.sources import SourceError
from vitviz.dataset.storage import IndexBusyError, IndexFormatError

__all__ = [
    "DatasetIndex",
    "IndexBusyError",
    "IndexFormatError",
    "QueryBusy",
    "QueryError",
    "QuerySession",
    "QueryStopped",
    "SourceError",
    "open_index",
]
