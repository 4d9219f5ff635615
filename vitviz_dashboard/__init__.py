"""The Streamlit dashboard behind app.py (the entry point: `streamlit run app.py`): four pages, Photo, Dataset,
Ask and Video.

    app.py           the pages (st.navigation); Photo: the sidebar, the images, the model and its key, and TABS
    page.py          the page's state: Settings, ModelKey, Photo, Page, and the keys that keep tab widgets' values
    names.py         what the page calls classes, prefix tokens and readouts (Readout), and the prediction line
    downloads.py     download buttons: a tab's overlay (PNG) and maps (.npz), one chart's numbers (CSV, .npz)
    state.py         the session state in one place: typed keys (Key) and the accessors between pages
    images.py        uploads, camera shots, the session's images and sample images
    knockout.py      heads and prefix tokens knocked out of the page's model, the banner, what changes
    sae_editing.py   a typed SAE folder opened (the allowed folders), and SAE latents edited in the page's model
    cache/           the memory budget and every cached result, keyed by ModelKey (see cache/__init__.py)
    sidebar/         the model picker, the folders it may open, and prompts (see sidebar/__init__.py)
    widgets/         controls and pictures the tabs share (see widgets/__init__.py)
    tabs/            one module per tab of the Photo page (see tabs/__init__.py)
    dataset/         the Dataset page: an index opened or built, its table, errors, heads, queries and keys, search,
                     SAE features
    ask/             the Ask page: a vision-language model's answer about a photo, and where each token looks
    video/           the Video page: a video model's prediction on a clip, and its maps over every frame

Streamlit runs app.py as a fresh ``__main__`` in every session, but these modules are imported once:
anything st.cache_data pickles must be defined here or in vitviz/, never in app.py. All computation
lives in vitviz/; these modules lay out widgets and call it.
"""
