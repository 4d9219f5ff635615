"""Sources: models from other libraries into vitviz's ViT, one module per source, each with its own load function
and its ModelSource record.

    torchvision.py   torchvision's VisionTransformer (vit_b_16 ... vit_h_14); load_torchvision for "torchvision:" specs
    from_timm.py     timm's VisionTransformer and VisionTransformerDistilled (DeiT, DINO, DINOv2, CLIP, SigLIP, MAE...)
    from_timm_swin.py  timm's SwinTransformer and SwinTransformerV2 (each block's window and shift read from it)
    timm_eva.py      timm's Eva family (EVA-02, DINOv3, PE...): rotary embeddings, SwiGLU, its config and weights
    huggingface.py   Hugging Face state dicts and configs (vit, deit, dinov2, dinov2_with_registers, CLIP, SigLIP...)
    huggingface_folder.py  Hugging Face folders into a ready ViT (class names, preprocessing); load_huggingface_hub
                     for "hf:" specs
    huggingface_swin.py  Hugging Face's Swin and Swin v2 (swin, swinv2; 4.x and 5 key names) into vitviz's Swin
    huggingface_convert.py  the conversion every Hugging Face ViT family shares (Family, convert): image or video
    huggingface_video.py  Hugging Face's VideoMAE, ViViT and TimeSformer (videomae, vivit, timesformer): clips of
                     tubelets or per-frame patches, joint or divided space-time attention, read exactly
    huggingface_vjepa2.py  Hugging Face's V-JEPA 2 (vjepa2): its encoder's 3-D rotary embedding, its attentive pooler
    huggingface_text.py  the text half of CLIP and SigLIP folders, its config checked before transformers builds it
    open_clip.py     open_clip models (OpenCLIP's VisionTransformer or a timm trunk), with their text tower
    timm.py          the "timm:" specs: a pretrained timm model through timm and the Hub cache, converted by
                     from_timm.py; names whose repository also holds open_clip's weights load through open_clip, with
                     their text tower (load_timm_with_text)
    source.py        ModelSource, the record each source declares for its "<prefix>:<name>" specs (its loader, how
                     its specs are written, which typed names are safe on a page); specs.SOURCES lists them
    weights_files.py safetensors files and shards, refused from their size and header before a tensor is read;
                     check_weights_file for the files timm and open_clip read themselves
    common.py        what they share: renaming rules, q/k/v fusion, JSON configs, logit scale checks

Every source reproduces its library's outputs and attention weights (see tests/test_import_*.py). The converters
(``from_timm`` ...) are exported by ``vitviz.loading``.
"""
