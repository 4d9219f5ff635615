"""The Ask page's "Open the vision tower in Photo": the loaded VLM's vision tower (cache/vlm.py converts it once per
model) stored beside the Photo page's uploads and handed to its model picker, with the photo chosen here; where
vitviz cannot read the tower, the reason in one caption instead."""

from __future__ import annotations

import streamlit as st

from vitviz_dashboard.cache.vlm import Tower, VLMKey, get_vlm, tower_checkpoint
from vitviz_dashboard.sidebar.model_picker import store_checkpoint
from vitviz_dashboard.state import HandedCheckpoint, hand_checkpoint_to_photo_page, show_on_photo_page

TOWER_BUTTON = "ask|tower"


def offer_tower(key: VLMKey, photo_name: str, photo_page: st.Page) -> None:
    """Under the sidebar's model: the button that opens the loaded model's vision tower in the Photo page, or why
    it cannot be opened. Call it once the model has loaded (get_vlm's cache then holds it)."""
    tower = tower_checkpoint(key, get_vlm(key))
    if tower.reason:
        st.sidebar.caption(f"The vision tower cannot be opened in Photo: {tower.reason.rstrip('.')}.")
        return
    if st.sidebar.button(
        "Open the vision tower in Photo",
        key=TOWER_BUTTON,
        help="The model's vision tower as a vitviz ViT (a backbone, with the processor's preprocessing of the whole "
        "photo): every map of the Photo page, on this photo.",
    ):
        open_tower(key.spec, tower, photo_name, photo_page)


def open_tower(spec: str, tower: Tower, photo_name: str, photo_page: st.Page) -> None:
    """Store the tower's checkpoint, make it the Photo page's model (its picker on "path or upload...", no path
    typed) and ``photo_name`` its photo, then go there."""
    path = store_checkpoint(tower.data)
    hand_checkpoint_to_photo_page(HandedCheckpoint(path, f"The vision tower of `{spec}`, converted to a vitviz ViT."))
    show_on_photo_page(photo_name)  # the Photo page's Image picker shows it
    st.switch_page(photo_page)
