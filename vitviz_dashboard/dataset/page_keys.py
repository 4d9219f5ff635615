"""The Dataset page's keys live in vitviz_dashboard/state.py ("the Dataset page"). This name is left for
tabs/sae_features.py, which reads the open index's folder, until it reads ``state.DATASET_FOLDER``."""

from vitviz_dashboard.state import DATASET_FOLDER

FOLDER = str(DATASET_FOLDER)
