"""The Streamlit dashboard behind app.py (the entry point: `streamlit run app.py`).

    sidebar.py       the model picker and display settings
    model_dirs.py    which typed paths and specs the page may open (VITVIZ_MODEL_DIRS)
    images.py        uploads, camera shots, the session's images and sample images
    common.py        what every tab shares: Settings, Photo, Page, tab-widget keys, downloads, names
    cached.py        every cached computation (model, decoded photos, forward pass, maps, figures)
    tabs/<name>.py   one module per tab: overview, heads, patch, class_specific, anatomy, tokens,
                     faithfulness

Streamlit runs app.py as a fresh ``__main__`` in every session, but these modules are imported once:
anything st.cache_data pickles must be defined here or in vitviz/, never in app.py. All computation
lives in vitviz/; these modules lay out widgets and call it.
"""
