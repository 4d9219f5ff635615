"""The popular pretrained ViTs that the dashboard's model picker offers, by label, with their specs.

Each downloads once when online (into the Hugging Face or torch cache) and loads offline afterwards;
tests/test_app_models.py checks that every timm name is one of timm's pretrained tags.
"""

from __future__ import annotations

from vitviz.loading.sources.open_clip import SOURCE as OPEN_CLIP
from vitviz.loading.sources.torchvision import SOURCE as TORCHVISION
from vitviz.loading.sources.torchvision import TORCHVISION_ARCHS
from vitviz.loading.specs import HUB, TIMM

POPULAR_MODELS: dict[str, str] = {
    "DeiT-B/16 distilled (timm)": TIMM.spec("deit_base_distilled_patch16_224.fb_in1k"),
    "DINO ViT-S/8 (timm)": TIMM.spec("vit_small_patch8_224.dino"),
    "DINOv2-B/14 with registers (timm)": TIMM.spec("vit_base_patch14_reg4_dinov2.lvd142m"),
    "DINOv3 ViT-S/16 (timm)": TIMM.spec("vit_small_patch16_dinov3.lvd1689m"),
    "DINOv3 ViT-B/16 (timm)": TIMM.spec("vit_base_patch16_dinov3.lvd1689m"),
    "EVA-02 B/14 (timm)": TIMM.spec("eva02_base_patch14_224.mim_in22k"),
    "Perception Encoder PE-Core B/16 (timm)": TIMM.spec("vit_pe_core_base_patch16_224.fb"),
    "AIMv2-L/14 (timm)": TIMM.spec("aimv2_large_patch14_224.apple_pt"),
    "CLIP ViT-B/16 with its text tower (OpenAI, open_clip)": OPEN_CLIP.spec("ViT-B-16/openai"),
    "SigLIP B/16 with its text tower (open_clip)": OPEN_CLIP.spec("ViT-B-16-SigLIP/webli"),
    "SigLIP B/16 with its text tower (Hugging Face, google)": HUB.spec("google/siglip-base-patch16-224"),
    "MAE ViT-B/16 (timm)": TIMM.spec("vit_base_patch16_224.mae"),
    "ViT-B/16 AugReg ImageNet-1k (timm)": TIMM.spec("vit_base_patch16_224.augreg2_in21k_ft_in1k"),
    "ViT-B/16 (Hugging Face, google)": HUB.spec("google/vit-base-patch16-224"),
}
TORCHVISION_SPECS: tuple[str, ...] = tuple(TORCHVISION.spec(arch) for arch in TORCHVISION_ARCHS)
EXAMPLE_SPEC = TIMM.spec("vit_small_patch14_reg4_dinov2.lvd142m")  # a small model with registers, to type in
