"""Rendering: arrays in, pictures and figures out. No streamlit here: the dashboard and the CLIs both draw with it.

overlays.py      patch maps on the photo: colormaps, overlays, outlined and masked patches, grids of small pictures,
                 colour scales with their value range (scale_strip, with_scale)
figures.py       plotly figures: heatmaps, grids of maps, predictions, per-layer and per-head charts, votes
heads.py         layer x head grids of signed numbers: head importance, logit attribution
feature_pictures.py  patch features as pictures: PCA colours and parts painted patch by patch, side by side
answers.py       a VLM's answer out: answer.json's record, attention.npz's arrays, maps over the photo, share chart
curves.py        training curves (curves.png) from a run's metrics.jsonl
video_overlays.py  maps over a clip's frames: painted per frame, blended on one colour scale, as GIF and MP4
video_figures.py  attention over time: the frames x frames heatmap, the readout per frame
"""
