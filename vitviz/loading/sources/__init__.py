"""Sources: models from other libraries into vitviz's ViT, one module per source, each with its own load function.

    torchvision.py   torchvision's VisionTransformer (vit_b_16 ... vit_h_14); load_torchvision for "torchvision:" specs
    timm.py          timm's VisionTransformer and VisionTransformerDistilled (DeiT, DINO, DINOv2, CLIP, SigLIP, MAE...)
    timm_eva.py      timm's Eva family (EVA-02, DINOv3, PE...): rotary embeddings, SwiGLU, its config and weights
    huggingface.py   Hugging Face folders and state dicts (vit, deit, dinov2, dinov2_with_registers, CLIP, SigLIP);
                     load_huggingface_hub for "hf:" specs
    huggingface_text.py  the text half of CLIP and SigLIP folders, its config checked before transformers builds it
    open_clip.py     open_clip models (OpenCLIP's VisionTransformer or a timm trunk), with their text tower; timm
                     names whose repository also holds open_clip's weights (load_timm_with_text)
    common.py        what they share: renaming rules, q/k/v fusion, JSON configs, logit scale checks

Every source reproduces its library's outputs and attention weights (see tests/test_import_*.py). The converters
(``from_timm`` ...) are exported by ``vitviz.loading``.
"""
