"""Small random models: the stand-ins for trained models in every test (none may download or train one).

``build_tiny_vit`` builds one of the ``TINY_FAMILIES`` in memory (the ``tiny_vit`` fixture of tests/conftest.py runs
a test over each); ``tiny_checkpoint`` saves one as a vitviz checkpoint for the page, browser and command-line tests.
``perturbed`` is a random timm model with every part away from its initial value, ``TINY_CFG`` a tiny
open_clip config, and ``tiny_hf_config`` a tiny Hugging Face config of any family the importer reads
(``tiny_hf_vit_config`` its ViT), for the importer and loading tests (the vision-language models' tiny folders are
in tiny_vlms.py, the CLIP and SigLIP folders with tokenizers in tiny_text.py).
"""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from vitviz import Preprocessing, ViT, ViTConfig, save_checkpoint

# The Hugging Face models' sizes (tiny_hf_config): 2 blocks of 4 heads, width 32, 8-pixel patches on 32 x 32 ...
TINY_HF_VIT = dict(
    hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32, patch_size=8
)
# ... or 3 blocks of width 48 (MLP 96); DINOv2 gives its MLP as a ratio of the width instead
SMALL_HF_VIT = TINY_HF_VIT | dict(hidden_size=48, num_hidden_layers=3, intermediate_size=96)
SMALL_HF_DINOV2 = {key: value for key, value in SMALL_HF_VIT.items() if key != "intermediate_size"} | dict(mlp_ratio=2)
# the image-text models' text tower (never compared): one block of width 32, with CLIP and SigLIP's token ids
TINY_HF_TEXT = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64)
TINY_HF_TOKENS = dict(vocab_size=99, max_position_embeddings=16, bos_token_id=1, eos_token_id=2, pad_token_id=0)

# model_type -> (its transformers config class, the sizes tiny_hf_config gives it)
TINY_HF_FAMILIES: dict[str, tuple[str, dict]] = {
    "vit": ("ViTConfig", TINY_HF_VIT),
    "deit": ("DeiTConfig", SMALL_HF_VIT),
    "dinov2": ("Dinov2Config", SMALL_HF_DINOV2),
    "dinov2_with_registers": ("Dinov2WithRegistersConfig", SMALL_HF_DINOV2),
    "dinov3_vit": ("DINOv3ViTConfig", TINY_HF_VIT),
    "ijepa": ("IJepaConfig", TINY_HF_VIT),
    "clip_vision_model": ("CLIPVisionConfig", SMALL_HF_VIT),
    "siglip_vision_model": ("SiglipVisionConfig", SMALL_HF_VIT),
    "aimv2_vision_model": ("Aimv2VisionConfig", TINY_HF_VIT),
    "clip": ("CLIPConfig", dict(vision_config=SMALL_HF_VIT, text_config=TINY_HF_TEXT | TINY_HF_TOKENS)),
    "siglip": ("SiglipConfig", dict(vision_config=SMALL_HF_VIT, text_config=TINY_HF_TEXT | TINY_HF_TOKENS)),
    "aimv2": (  # without the attention-pooling head, which vitviz refuses
        "Aimv2Config",
        dict(vision_config=TINY_HF_VIT | dict(use_head=False), text_config=TINY_HF_TEXT | dict(vocab_size=100)),
    ),
}

# 3 blocks of 4 heads, 8-pixel patches on a 32 x 32 input (a 4 x 4 grid), 5 classes
TINY = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=3, num_heads=4, mlp_size=64, num_classes=5)

# The kinds of ViT whose differences the explanation methods and interventions must handle, by what they change:
# the prefix tokens, the readout, the grid's shape, the position encoding and the norms.
TINY_FAMILIES: dict[str, dict] = {
    "cls": {},  # ViT / DeiT: a [CLS] token read by the head, learned positions
    "registers": dict(num_register_tokens=2, layer_scale=True),  # DINOv2 with registers: more prefix tokens
    "mean-pooled": dict(class_token=False, pooling="mean"),  # no [CLS]: the head reads the mean patch token
    "map-pooled": dict(class_token=False, pooling="map", num_register_tokens=2),  # SigLIP: attention pooling
    "non-square": dict(image_size=(16, 24)),  # a 2 x 3 grid: rows and columns must not be swapped
    "rotary": dict(rotary="dinov3", absolute_positions=False, norm="rmsnorm", qk_norm=True),  # DINOv3 / AIMv2 parts
}


def build_tiny_vit(family: str = "cls", noise: float = 0.3, seed: int = 0, **overrides) -> ViT:
    """A ``TINY`` ViT of that family (any ViTConfig field can be overridden) in eval mode, whose every weight is
    moved off its initial value by Gaussian noise of this size (seeded), so every part matters: LayerScale, the
    zero-initialised head, the biases, and attention maps far from uniform."""
    torch.manual_seed(seed)
    model = ViT(ViTConfig(**(TINY | TINY_FAMILIES[family] | overrides))).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param), alpha=noise)
    return model


def tiny_checkpoint(path: Path, names=("cat", "dog", "bird"), **config) -> Path:
    """2 blocks of 4 heads, 8-pixel patches on a 32 x 32 input (a 4 x 4 grid), one class per name (no
    names: a backbone). Any other ViTConfig field can be given: registers, pooling="map"...
    The weights are drawn large (std 0.3), so attention maps and predictions are far from uniform."""
    torch.manual_seed(0)
    sizes = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_size=64)
    model = ViT(ViTConfig(**(sizes | config), num_classes=len(names)))
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(std=0.3)
    side = (
        model.config.image_hw[0] if model.config.image_hw[0] == model.config.image_hw[1] else 32
    )  # the input it was built for
    save_checkpoint(path, model, list(names), Preprocessing(resize=side, crop=side, mean=(0.5,) * 3, std=(0.25,) * 3))
    return path


def perturbed(name: str, **kwargs) -> torch.nn.Module:
    """A random timm model whose every part matters: LayerScale gains near 1 instead of 1e-5, prefix
    tokens and the pooling query far apart, heads that give logits of order 1."""
    import timm  # here, not above: most tests that build tiny models need no timm

    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, **kwargs).eval()
    with torch.no_grad():
        for param_name, param in model.named_parameters():
            if param_name.endswith("gamma"):
                param.uniform_(0.5, 1.5)
            elif param_name.startswith(("cls_token", "reg_token", "dist_token", "attn_pool.latent")):
                param.normal_(std=0.5)
            elif param_name.startswith("head"):
                param.normal_(std=0.05)
            elif param_name == "rope.freqs":  # RoPE-Mixed's learned frequencies: far from their start
                param.normal_(std=0.3)
            elif param_name.endswith(("attn.qkv.weight", "attn.q_proj.weight", "attn.k_proj.weight")):
                # scores of a few units: peaked, position-sensitive attention
                param.normal_(std=0.06)
            else:
                param.add_(torch.randn_like(param), alpha=0.02)
    return model


# a tiny open_clip model config (open_clip.create_model's model_cfg): 2 blocks of width 32 on 32 x 32, 1 text block
TINY_CFG = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 32, "layers": 2, "width": 32, "patch_size": 8, "head_width": 8},
    "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 16, "heads": 2, "layers": 1},
}


def tiny_hf_config(family: str, **overrides):
    """A transformers config of ``TINY_HF_FAMILIES[family]``'s class and sizes, eager attention (attention weights as
    tensors, for ``output_attentions``), with ``overrides``; class names "label i" when it has labels and ``id2label``
    is not given. The one place the tests build a tiny Hugging Face config (tiny_text and tiny_vlms build whole
    models and folders)."""
    import transformers  # here, not above: most tests that build tiny models need no transformers

    class_name, sizes = TINY_HF_FAMILIES[family]
    labels = (
        {"id2label": {i: f"label {i}" for i in range(overrides["num_labels"])}} if "num_labels" in overrides else {}
    )
    return getattr(transformers, class_name)(**(sizes | dict(attn_implementation="eager") | labels | overrides))


def tiny_hf_vit_config(**overrides):
    """``tiny_hf_config("vit", **overrides)``: a ``transformers.ViTConfig`` of TINY_HF_VIT's sizes."""
    return tiny_hf_config("vit", **overrides)


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """Torch on one thread inside the block (tiny models run fastest so, and far faster than on two busy cores)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def by_hand(model: ViT, images: torch.Tensor, block: int, edit) -> torch.Tensor:
    """The logits of ``model``'s forward written out block by block, with block ``block``'s output patch tokens (the
    tokens after the first) passed through ``edit``: the reference for the SAE editing tests."""
    x, grid = model.embed(images)
    arguments = model.block_arguments(grid, x.shape[0])
    for index, layer in enumerate(model.blocks):
        x = layer(x, arguments[index]).hidden
        if index == block:
            x = torch.cat([x[:, :1], edit(x[:, 1:])], dim=1)
    return model.forward_head(x, grid).logits
