"""The session-state keys of the Dataset page that more than one of its modules sets (page.py draws the widgets)."""

from vitviz_dashboard.page import KEPT

# the sidebar's values and the open tab outlive a visit to the Photo page: keep_tab_widgets() writes back "kept|" keys
FOLDER, COLORMAP, ALPHA, TAB = (f"{KEPT}dataset|{name}" for name in ("folder", "colormap", "alpha", "tab"))
# the Table tab's filters and order: kept through a visit to the Photo page, and read by the Grid tab
CLASSES, CORRECTNESS, CONFIDENCE, SORT, DESCENDING = (
    f"{KEPT}dataset|{name}" for name in ("classes", "correctness", "confidence", "sort", "descending")
)
