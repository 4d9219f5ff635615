"""One module per tab of the page, each with a ``draw(page)``; app.py's TABS maps each tab's name to it.

    overview.py        the top-k predictions and the attention rollout
    heads.py           Heads & layers: every head's readout map, two choices compared, which heads matter
    patch.py           Click a patch: what one patch attends to, fused and per head
    patch_features.py  Features: the patch features, as PCA colours, a clicked patch's matches, k-means parts, over
                       several photos
    class_specific.py  Class-specific: gradient maps for any class, and the logit (or text) lens
    anatomy.py         Model anatomy: attention distance and entropy, position similarity, patch filters
    tokens.py          Tokens: attention to prefix tokens, token norms, the pooling head, tokens taken out
    faithfulness.py    Faithfulness: perturbation curves on one image
    sae_features.py    SAE features: a sparse autoencoder's top latents on the photo; latents edited in the model
    windowed.py        the same tabs for Swin (windows, merged stages): the rollout, each head over a clicked
                       patch's window per stage and block, head statistics inside windows, and one line on each
                       tab that does not apply
    windowed_features.py  Features for Swin: any block's tokens as PCA colours and matches on its stage's grid

Only the open tab runs (Streamlit's lazy tabs); most tabs are fragments, so their own controls re-run
only that tab."""
