"""The session-state keys of the Dataset page that more than one of its modules sets (page.py draws the widgets)."""

from vitviz_dashboard.page import KEPT

# the sidebar's values and the open tab outlive a visit to the Photo page: keep_tab_widgets() writes back "kept|" keys
FOLDER, COLORMAP, ALPHA, TAB = (f"{KEPT}dataset|{name}" for name in ("folder", "colormap", "alpha", "tab"))
