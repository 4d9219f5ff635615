"""The Video page: a video model's prediction on a clip, and where it looks in space and time.

page.py          the page: the model and the video, the prediction, the strip of frames with their maps, downloads
inputs.py        the video model (a Hub id or an allowed folder), colormap and opacity, the upload or the sample clip
sample.py        the sample clip: moving shapes drawn in code and encoded with PyAV (never downloaded)
controls.py      the map (rollout, relevance, a clicked patch's attention), layer, head, frame; the clicked token
strip.py         every frame with its map as thumbnails, and the chosen frame large and clickable, its colour scale
timeline.py      the frames x frames heatmap of a block, and the readout's attention per frame
downloads.py     the overlay as an animated GIF and an MP4, and the arrays as npz
"""
