"""One module per tab of the page, each with a ``draw(page, ...)``; app.py lists them in TABS order.

Only the open tab runs (Streamlit's lazy tabs); most tabs are fragments, so their own controls re-run
only that tab."""
