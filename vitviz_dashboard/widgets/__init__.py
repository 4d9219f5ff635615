"""Pieces the tabs share, drawn with streamlit.

controls.py         an index slider, the class picker, the colour legend, re-running the current tab
click_picture.py    a picture that reports where it was clicked, and the patch a click fell on
small_multiples.py  one map per head over a thumbnail of the photo
progress.py         a tqdm class drawing st.progress, for downloads and prompt embedding
"""
