"""open_clip models into vitviz's ViT, with their text tower.

    from_open_clip(model, tokenizer)        an open_clip CLIP or CustomTextCLIP already in memory
    load_open_clip("ViT-B-16/openai")       a pretrained tag of one of open_clip's model names
    load_open_clip("hf-hub:timm/ViT-B-16-SigLIP")   a Hub repository with open_clip_config.json

The image tower is either OpenCLIP's own ``VisionTransformer`` (OpenAI's and LAION's CLIP), converted here by
renaming, or a timm trunk (SigLIP and others, ``TimmModel``), converted by ``from_timm``. Its projection into the
shared space (``proj``, or the timm adapter's linear head) moves to the text tower, which keeps the open_clip model
for ``encode_text``. Both converted towers reproduce open_clip's ``encode_image`` and logits
(tests/test_import_open_clip.py). open_clip is imported inside the functions: ``import vitviz`` stays fast.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from torch import nn

from vitviz.loading import download
from vitviz.loading.build import build_model, check_finite, check_parameters
from vitviz.loading.errors import ModelLoadError, describe
from vitviz.loading.sources.common import add_zero_biases, check_logit_scale, read_json, rename
from vitviz.loading.sources.from_timm import from_timm
from vitviz.loading.sources.source import ModelSource
from vitviz.loading.sources.weights_files import check_weights_file
from vitviz.messages import clip_text, echo
from vitviz.model import ViT, ViTConfig
from vitviz.preprocessing import Preprocessing

_RULES = [
    (r"conv1\.weight", r"patch_embed.proj.weight"),  # no bias: zeros are added
    (r"class_embedding", r"cls_token"),  # (D,): reshaped below
    (r"positional_embedding", r"pos_embed"),  # (1 + N, D)
    (r"ln_pre\.", r"norm_pre."),
    (r"transformer\.resblocks\.(\d+)\.ln_1\.", r"blocks.\1.norm1."),
    (r"transformer\.resblocks\.(\d+)\.ln_2\.", r"blocks.\1.norm2."),
    (r"transformer\.resblocks\.(\d+)\.attn\.in_proj_(weight|bias)", r"blocks.\1.attn.qkv.\2"),  # q, k, v rows
    (r"transformer\.resblocks\.(\d+)\.attn\.out_proj\.", r"blocks.\1.attn.proj."),
    (r"transformer\.resblocks\.(\d+)\.mlp\.c_fc\.", r"blocks.\1.mlp.fc1."),
    (r"transformer\.resblocks\.(\d+)\.mlp\.c_proj\.", r"blocks.\1.mlp.fc2."),
    (r"transformer\.resblocks\.(\d+)\.ls_([12])\.gamma", r"blocks.\1.ls\2.gamma"),
    (r"ln_post\.", r"norm."),
]
TOKENIZER_FILES = [
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "spiece.model",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
]


def from_open_clip(model: nn.Module, tokenizer, source: str | None = None) -> ViT:
    """Convert an open_clip model (``open_clip.create_model(...)``) and its tokenizer (``open_clip.get_tokenizer``,
    or any callable turning a list of texts into a (N, context) tensor of token ids).

    The ViT is a backbone (no head) whose ``text_tower`` reads prompts: ``vitviz.zero_shot(vit, prompts)`` then
    gives logits equal to open_clip's ``logit_scale.exp() * cos (+ logit_bias)``. ``model`` is not changed.
    """
    from vitviz.text.towers import OpenClipTextTower

    visual = getattr(model, "visual", None)
    if visual is None or not hasattr(model, "encode_text") or not hasattr(model, "logit_scale"):
        raise ModelLoadError(
            f"expected an open_clip CLIP model (with .visual, .encode_text, .logit_scale); got {type(model).__name__}"
        )
    source = source or f"open_clip {type(model).__name__}"
    check_logit_scale(model.logit_scale, getattr(model, "logit_bias", None), source)
    check_finite({name: p for name, p in model.named_parameters() if not name.startswith("visual.")}, source)
    vit, projection = _image_tower(visual)
    vit.transform = preprocessing_from_open_clip(visual, vit.config)
    vit.class_names = []
    vit.text_tower = OpenClipTextTower(model, tokenizer, projection, source)
    vit.text_tower_note = None
    return vit.eval()


def _image_tower(visual: nn.Module) -> tuple[ViT, nn.Linear | None]:
    """vitviz's ViT for an open_clip image tower, and its projection into the shared space (None: there is none)."""
    from open_clip.timm_model import TimmModel
    from open_clip.transformer import VisionTransformer

    if isinstance(visual, TimmModel):
        names = [name for name, _ in visual.head.named_children() if name != "drop"]
        if names not in ([], ["proj"]):
            raise ModelLoadError(
                f"this open_clip timm tower has a {'/'.join(names)} head; vitviz converts a plain "
                "linear projection or none"
            )
        vit = from_timm(visual.trunk)
        projection = _copy_linear(visual.head.proj) if names else None
        if vit.head is not None:  # the trunk's own classifier is the projection (EVA-CLIP, PE-Core: timm_proj "")
            if projection is not None:
                raise ModelLoadError("this open_clip timm tower has a classifier and a projection after it")
            projection = vit.head
            vit.head = None
            vit.config = replace(vit.config, num_classes=0)
        return vit, projection
    if isinstance(visual, VisionTransformer):
        config = _describe(visual)
        source = "open_clip VisionTransformer"
        weights = {k: v for k, v in visual.state_dict().items() if k != "proj"}
        weights = rename(weights, _RULES, source=source)
        weights["cls_token"] = weights["cls_token"].reshape(1, 1, -1)
        weights["pos_embed"] = weights["pos_embed"].reshape(1, -1, config.hidden_size)
        vit = build_model(config, add_zero_biases(config, weights), source=source)
        projection = None
        if visual.proj is not None:  # pooled @ proj: a bias-free linear layer with the transposed matrix
            width, dim = visual.proj.shape
            projection = nn.Linear(width, dim, bias=False)
            projection.weight.data.copy_(visual.proj.detach().T)
        return vit, projection
    raise ModelLoadError(
        f"open_clip image tower {type(visual).__name__} is not a ViT vitviz converts "
        "(OpenCLIP's VisionTransformer or a timm ViT trunk)"
    )


def _copy_linear(layer: nn.Linear) -> nn.Linear:
    copy = nn.Linear(layer.in_features, layer.out_features, bias=layer.bias is not None)
    copy.load_state_dict(layer.state_dict())
    return copy


def _describe(visual: nn.Module) -> ViTConfig:
    """The ViTConfig of OpenCLIP's VisionTransformer, refusing by name what vitviz cannot reproduce."""
    from open_clip.transformer import LayerScale, QuickGELU, ResidualAttentionBlock

    def refuse(feature: str):
        raise ModelLoadError(f"this open_clip VisionTransformer uses {feature}, which vitviz's ViT does not have")

    if getattr(visual, "attn_pool", None) is not None:
        refuse("attentional pooling (CoCa)")
    if visual.pool_type not in ("tok", "avg"):
        refuse(f"pool_type={visual.pool_type!r}")
    blocks = list(visual.transformer.resblocks)
    if any(type(block) is not ResidualAttentionBlock for block in blocks):
        refuse(f"{type(blocks[0]).__name__} blocks")
    first = blocks[0]
    if hasattr(first, "ln_1_kv") or not isinstance(first.mlp, nn.Sequential) or len(first.mlp) != 3:
        refuse("cross-attention or a norm inside the MLP")
    activation = first.mlp[1]
    if isinstance(activation, QuickGELU):
        kind = "quick_gelu"
    elif isinstance(activation, nn.GELU):
        kind = "gelu_tanh" if activation.approximate == "tanh" else "gelu"
    else:
        refuse(f"the activation {type(activation).__name__}")
    norms = [visual.ln_post] + [m for block in blocks for m in (block.ln_1, block.ln_2)]
    if any(not isinstance(m, nn.LayerNorm) for m in norms):
        refuse("a normalisation other than LayerNorm")
    patch_h, patch_w = visual.patch_size
    if patch_h != patch_w:
        refuse(f"non-square patches ({patch_h}x{patch_w})")
    layer_scale = isinstance(first.ls_1, LayerScale)
    return ViTConfig(
        image_size=tuple(visual.image_size),
        patch_size=patch_h,
        num_channels=visual.conv1.in_channels,
        hidden_size=visual.conv1.out_channels,
        num_layers=len(blocks),
        num_heads=first.attn.num_heads,
        mlp_size=first.mlp[0].out_features,
        num_classes=0,
        pooling="cls" if visual.pool_type == "tok" else "mean",
        norm_pre=isinstance(visual.ln_pre, nn.LayerNorm),
        layer_scale=layer_scale,
        activation=kind,
        fc_norm=bool(visual.final_ln_after_pool),  # the final LayerNorm on the pooled vector only
        layer_norm_eps=first.ln_1.eps,
        qkv_bias=first.attn.in_proj_bias is not None,
    )


def preprocessing_from_open_clip(visual: nn.Module, config: ViTConfig) -> Preprocessing:
    """open_clip's evaluation transform (its ``preprocess_cfg``): "shortest" resizes the shorter side and crops the
    centre, "squash" resizes both sides. "longest" (resize the longer side, pad the rest) has no vitviz equivalent
    and is squashed."""
    cfg = dict(getattr(visual, "preprocess_cfg", None) or {})
    size = cfg.get("size", config.image_hw)
    height, width = (size, size) if isinstance(size, int) else tuple(size)
    interpolation = cfg.get("interpolation", "bicubic")
    if interpolation not in ("nearest", "bilinear", "bicubic"):
        interpolation = "bicubic"
    mean = tuple(cfg.get("mean", getattr(visual, "image_mean", None) or (0.48145466, 0.4578275, 0.40821073)))
    std = tuple(cfg.get("std", getattr(visual, "image_std", None) or (0.26862954, 0.26130258, 0.27577711)))
    if cfg.get("resize_mode", "shortest") == "shortest" and height == width:
        return Preprocessing(resize=height, crop=height, mean=mean, std=std, interpolation=interpolation)
    return Preprocessing(resize=(height, width), crop=None, mean=mean, std=std, interpolation=interpolation)


# --- load_model("open_clip:...") ---------------------------------------------------------------


def load_open_clip(name: str) -> ViT:
    """``"ViT-B-16/openai"`` (open_clip's model name and pretrained tag) or ``"hf-hub:<org>/<name>"``.

    vitviz fetches the weights, config and tokenizer files into the Hugging Face cache itself (failing within
    seconds offline, with a message naming the cache), then open_clip builds the model and tokenizer from the cache.
    """
    import open_clip

    spec = f"open_clip:{name}"
    if name.startswith("hf-hub:"):
        repo_id = name.removeprefix("hf-hub:").strip("/")
        if not download.REPO_ID.fullmatch(repo_id):
            raise ModelLoadError(
                f"{echo(repo_id)} is not a Hugging Face repository id (org/name, 96 characters each at most)"
            )
        offline = not download.hub_reachable()
        config = download.hub_file(repo_id, ["open_clip_config.json"], spec, offline=offline)
        weights = download.hub_file(
            repo_id, ["open_clip_model.safetensors", "open_clip_pytorch_model.bin"], spec, offline=offline
        )
        model_cfg = read_json(config).get("model_cfg", {})
        _check_model_cfg(model_cfg, weights, spec)
        check_weights_file(weights)  # its header: a hostile file in the cache is refused before open_clip reads it
        _fetch_tokenizer(model_cfg, spec, offline)
        create = dict(model_name=f"hf-hub:{repo_id}")
        tokenizer_name = f"hf-hub:{repo_id}"
    else:
        model_name, _, tag = name.partition("/")
        if model_name not in open_clip.list_models():
            raise ModelLoadError(f"open_clip has no model {echo(model_name)}; open_clip.list_models() lists them")
        tags = open_clip.list_pretrained_tags_by_model(model_name)
        if tag not in tags:
            raise ModelLoadError(
                f"open_clip has no pretrained weights {echo(name)}; give <model>/<tag>, with tags of "
                f"{model_name}: {', '.join(tags) or 'none'}"
            )
        offline = not download.hub_reachable()
        hf_hub = open_clip.get_pretrained_cfg(model_name, tag).get("hf_hub") or ""
        if hf_hub:
            parts = hf_hub.strip("/").split("/")
            repo_id, filename = "/".join(parts[:2]), "/".join(parts[2:])
            candidates = [filename] if filename else ["open_clip_model.safetensors", "open_clip_pytorch_model.bin"]
            check_weights_file(download.hub_file(repo_id, candidates, spec, offline=offline))
        _fetch_tokenizer(open_clip.get_model_config(model_name) or {}, spec, offline)
        create = dict(model_name=model_name, pretrained=tag)
        tokenizer_name = model_name
    try:
        with download.cache_only(offline):
            clip_model = open_clip.create_model(**create, require_pretrained=True)
            tokenizer = open_clip.get_tokenizer(tokenizer_name)
    except Exception as error:  # the library's errors come in many kinds: a message, never a traceback
        raise ModelLoadError(f"open_clip could not build {clip_text(spec)} ({describe(error)})") from None
    model = from_open_clip(clip_model.eval(), tokenizer, source=spec)
    clip_model.visual = nn.Identity()  # vitviz's ViT holds the image tower now: do not keep it twice
    return model


# open_clip's defaults (CLIPVisionCfg, CLIPTextCfg) for the sizes of its own towers
_TOWER_DEFAULTS = {
    "vision_cfg": dict(layers=12, width=768, mlp_ratio=4.0),
    "text_cfg": dict(layers=12, width=512, mlp_ratio=4.0, vocab_size=49408, context_length=77),
}


def _check_model_cfg(model_cfg: object, weights: Path, spec: str) -> None:
    """Refuse, before open_clip builds anything, an open_clip_config.json whose model_cfg (or a tower's) is not an
    object, whose sizes are not positive numbers, or whose towers have more parameters (at least 4 + 2 * mlp_ratio
    times width squared a layer, and the text's embeddings) than its weights file can hold at one byte each, or than
    the memory free. Towers built by timm or transformers from a name of theirs are left to them."""
    if not isinstance(model_cfg, dict):
        raise ModelLoadError(f"{spec}: open_clip_config.json's model_cfg must be an object; got {echo(model_cfg, 80)}")
    least = 0
    for key, defaults in _TOWER_DEFAULTS.items():
        cfg = model_cfg.get(key, {})
        if not isinstance(cfg, dict):
            raise ModelLoadError(f"{spec}: open_clip_config.json's {key} must be an object; got {echo(cfg, 80)}")
        if cfg.get("timm_model_name") or cfg.get("hf_model_name"):
            continue
        sizes = {name: cfg.get(name, default) for name, default in defaults.items()}
        resnet = isinstance(sizes["layers"], (list, tuple))  # a ResNet's layers: blocks per stage
        numbers = [*(sizes["layers"] if resnet else [sizes["layers"]]), *(v for k, v in sizes.items() if k != "layers")]
        if not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 for v in numbers
        ):
            raise ModelLoadError(
                f"{spec}: open_clip_config.json's {key} sizes must be positive numbers; got {echo(sizes, 120)}"
            )
        width, layers = sizes["width"], sum(sizes["layers"]) if resnet else sizes["layers"]
        per_layer = width * width * (1 if resnet else 4 + 2 * sizes["mlp_ratio"])  # a bottleneck has 9 w^2 or more
        least += int(layers * per_layer + (sizes.get("vocab_size", 0) + sizes.get("context_length", 0)) * width)
    size = weights.stat().st_size
    if least > size:
        raise ModelLoadError(
            f"{spec}: open_clip_config.json describes at least {least:,} parameters, more than its "
            f"{size:,}-byte weights file ({weights.name}) can hold"
        )
    check_parameters(least, spec)


def _fetch_tokenizer(model_cfg: dict, spec: str, offline: bool) -> None:
    """The files of the Hugging Face tokenizer an open_clip config names (SigLIP's), into the Hub cache.
    CLIP's own BPE tokenizer ships with open_clip and needs nothing."""
    repo_id = (model_cfg.get("text_cfg") or {}).get("hf_tokenizer_name")
    if not isinstance(repo_id, str) or not download.REPO_ID.fullmatch(repo_id):
        return
    found = [download.hub_file(repo_id, [name], spec, offline=offline, required=False) for name in TOKENIZER_FILES]
    if not any(found):
        raise ModelLoadError(
            f"{spec}: the tokenizer {repo_id} has none of {', '.join(TOKENIZER_FILES)}"
            + (f" in the cache ({download.cache_folder()}); is this machine offline?" if offline else "")
        )


def names_no_path(name: str) -> bool:
    """``<model>/<tag>`` of open_clip's registry, or ``hf-hub:<org>/<name>``: never open_clip's ``local-dir:``."""
    return bool(download.REPO_ID.fullmatch(name.removeprefix("hf-hub:")))


SOURCE = ModelSource(
    "open_clip", load_open_clip, "'open_clip:<model>/<tag>' or 'open_clip:hf-hub:<org>/<name>'", names_no_path
)
