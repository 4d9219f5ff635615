"""The Ask page: a vision-language model asked about a photo, and where each token of its answer looks.

page.py          the page: inputs, the answer (asked once, with progress), then each view of the chosen token
words.py         the chosen token's attention on the text before it (the question's words), a text heatmap
overview.py      the layer x head heatmap of one token; a click chooses the map's layer and head
compare.py       two tokens' maps side by side on one colour scale
patches.py       patches chosen on the photo: which tokens look at them, and the answer with them knocked out
inputs.py        the model (a Hub id or an allowed folder), precision, the question, an answer, the token limit
tokens.py        the answer as clickable tokens (st.pills)
maps.py          the chosen token's attention or relevance over the photo: layers, head, tile; colormap, opacity
shares.py        the image-share chart per layer: image, text, first token
lens.py          the logit lens on the image tokens at a chosen layer
knockout.py      the knock-out curve of the map shown, on demand (a button)
downloads.py     answer.json, attention.npz and the map's PNG
tower.py         "Open the vision tower in Photo" (the picker's hand-over), or why the tower cannot be read
"""
