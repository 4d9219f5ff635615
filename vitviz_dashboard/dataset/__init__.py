"""The Dataset page: an index made by `vitviz index` (docs/dataset-index.md), browsed, queried and compared.

    page.py           dataset_page(): the folder in the sidebar, then one tab per view (only the open one runs)
    opening.py        opening a typed index folder (the allowed folders, a message for each bad folder), the photos
                      behind it, the index's model, and opening an image in the Photo page
    indexing.py       indexing a small folder from the page (the command's code, with a progress bar), or the
                      session's uploaded photos as a small dataset of their own (in the session's own folder)
    drawing.py        the one door to vitviz's drawing functions (overlays, patch marks, crops)
    table.py          the table of images: filters (by tag too), sorting, pages, row selection, tagging, thumbnails
    sql_box.py        the read-only SQL box: a query runs when submitted, in a thread, with a Stop button; its
                      result is kept in the session
    confusion_matrix.py  the Errors tab: the confusion matrix (its cells select their images) and per-class
                      mean maps
    heads.py          heads over the dataset: distance with bootstrap intervals and their settling, entropy, prefix
                      attention, heads clustered by their statistics, a head's most extreme images
    queries_keys.py   one head's queries and keys in one PCA space (AttentionViz), over a sample of images
    sae_features.py   the Features (SAE) tab: an SAE's latents over the index (vitviz.sae.browse), sorted by
                      frequency or mean activation; per latent its top images with its codes drawn over them, a
                      histogram, their labels, the classes it raises (direct logit attribution of its decoder column)
    grid.py           the image grid, the main view of the session's one selection (a confusion cell's, a latent's,
                      a SQL result's, a lasso's, an image's nearest): thumbnails with a map drawn patch by patch
                      on one colour scale, pages, "Similar" under each image
    export.py         a selection taken away: its rows as CSV or Parquet, or a sub-index in a new allowed folder
    embedding.py      the embedding map: pooled embeddings by PCA or t-SNE, coloured by any column; a lasso selects
                      images, the selection drawn solid and listed, ticked rows ringed
    slices.py         accuracy and mean probability with 95 % intervals by one column or two crossed (numeric ones
                      in quantile bins), beside all images; a click on a bar selects its images
    compare.py        a second index of the same images (another model): agreement, disagreements, both maps
    latents.py        beside sae_features.py: the overview of all latents (frequency against mean activation, a click
                      opens one), the images where a latent fires (a selection for the grid, and a slice of accuracy)
    search.py         patch search: the k nearest patches across the dataset, as crops with their photos; its
                      results sent to the Grid (with their similarity) or one opened in Photo
    link.py           the view in the address (index, tab, filters), filters and ticks per index, the selection
    saved.py          the sidebar's named views kept beside the index: save the open view, open or delete one

The computations live in vitviz.dataset (analysis.py, views.py, photos.py, index.py) and vitviz.sae.browse, kept
through cache/dataset.py; these modules lay out widgets. Each tab is ``draw(page: DatasetPage)``, listed in
page.TABS; the page's session keys are in vitviz_dashboard/state.py ("the Dataset page").
"""
