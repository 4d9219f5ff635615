"""Weights from torchvision and Hugging Face into vitviz's ViT.

Both converters rename keys with a table of regular expressions and fuse separate
query/key/value projections into the single ``qkv`` projection vitviz uses. Any key
that no rule covers is an error, so a layer can never be silently dropped.
Transformers is not needed: a Hugging Face folder is read with torch and json alone.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import torch
from torch import nn

from vitviz.checkpoint import ModelLoadError, build_model
from vitviz.images import Preprocessing
from vitviz.model import ViT, ViTConfig

TORCHVISION_ARCHS = ("vit_b_16", "vit_b_32", "vit_l_16", "vit_l_32", "vit_h_14")

# (pattern, replacement) pairs; \1 is the block index
_TORCHVISION_RULES = [
    (r"conv_proj\.(weight|bias)", r"patch_embed.proj.\1"),
    (r"class_token", r"cls_token"),
    (r"encoder\.pos_embedding", r"pos_embed"),
    (r"encoder\.layers\.encoder_layer_(\d+)\.ln_1\.", r"blocks.\1.norm1."),
    (r"encoder\.layers\.encoder_layer_(\d+)\.ln_2\.", r"blocks.\1.norm2."),
    (r"encoder\.layers\.encoder_layer_(\d+)\.self_attention\.in_proj_(weight|bias)", r"blocks.\1.attn.qkv.\2"),
    (r"encoder\.layers\.encoder_layer_(\d+)\.self_attention\.out_proj\.", r"blocks.\1.attn.proj."),
    (r"encoder\.layers\.encoder_layer_(\d+)\.mlp\.0\.", r"blocks.\1.mlp.fc1."),
    (r"encoder\.layers\.encoder_layer_(\d+)\.mlp\.3\.", r"blocks.\1.mlp.fc2."),
    (r"encoder\.ln\.", r"norm."),
    (r"heads\.head\.", r"head."),
]

# Hugging Face names: files on the Hub (and transformers 4) use the first group,
# transformers 5 models in memory the second. Both are accepted.
_HUGGINGFACE_RULES = [
    (r"embeddings\.cls_token", r"cls_token"),
    (r"embeddings\.position_embeddings", r"pos_embed"),
    (r"embeddings\.patch_embeddings\.projection\.", r"patch_embed.proj."),
    (r"encoder\.layer\.(\d+)\.layernorm_before\.", r"blocks.\1.norm1."),
    (r"encoder\.layer\.(\d+)\.layernorm_after\.", r"blocks.\1.norm2."),
    (r"encoder\.layer\.(\d+)\.attention\.attention\.(query|key|value)\.", r"blocks.\1.attn.\2."),
    (r"encoder\.layer\.(\d+)\.attention\.output\.dense\.", r"blocks.\1.attn.proj."),
    (r"encoder\.layer\.(\d+)\.intermediate\.dense\.", r"blocks.\1.mlp.fc1."),
    (r"encoder\.layer\.(\d+)\.output\.dense\.", r"blocks.\1.mlp.fc2."),
    (r"layers\.(\d+)\.layernorm_before\.", r"blocks.\1.norm1."),
    (r"layers\.(\d+)\.layernorm_after\.", r"blocks.\1.norm2."),
    (r"layers\.(\d+)\.attention\.(q|k|v)_proj\.", r"blocks.\1.attn.\2."),
    (r"layers\.(\d+)\.attention\.o_proj\.", r"blocks.\1.attn.proj."),
    (r"layers\.(\d+)\.mlp\.(fc1|fc2)\.", r"blocks.\1.mlp.\2."),
    (r"layernorm\.", r"norm."),
    (r"classifier\.", r"head."),
]
# Weights that have no counterpart in a classifier and are left out on purpose:
# the masked-image-modelling token and ViTModel's tanh pooler (not used for classification).
_HUGGINGFACE_UNUSED = re.compile(r"(embeddings\.mask_token|pooler\.dense\.(weight|bias))$")
_QKV_PARTS = {"query": 0, "key": 1, "value": 2, "q": 0, "k": 1, "v": 2}


def from_torchvision(model: nn.Module) -> ViT:
    """Convert a ``torchvision.models.VisionTransformer`` (vit_b_16 ... vit_h_14, any weights).

    The result reproduces the original's logits; class names and preprocessing are not
    part of a torchvision model, so ``load_model("torchvision:...")`` attaches them.
    """
    from torchvision.models import VisionTransformer

    if not isinstance(model, VisionTransformer):
        raise TypeError(f"expected a torchvision VisionTransformer, got {type(model).__name__}")
    if not hasattr(model, "conv_proj") or model.representation_size is not None:
        raise ModelLoadError("torchvision ViTs with a convolutional stem or a pre-logits layer are not supported")
    blocks = list(model.encoder.layers)
    config = ViTConfig(
        image_size=model.image_size,
        patch_size=model.patch_size,
        hidden_size=model.hidden_dim,
        num_layers=len(blocks),
        num_heads=blocks[0].self_attention.num_heads,
        mlp_size=model.mlp_dim,
        num_classes=model.num_classes,
        dropout=model.dropout,
        attention_dropout=model.attention_dropout,
        layer_norm_eps=blocks[0].ln_1.eps,
    )
    state_dict = _rename(model.state_dict(), _TORCHVISION_RULES, source="torchvision model")
    return build_model(config, state_dict, source="torchvision model")


def from_huggingface(state_dict: dict[str, torch.Tensor], config: dict) -> ViT:
    """Convert a Hugging Face ``ViTForImageClassification`` or ``ViTModel`` state dict.

    ``config`` is the model's config.json as a dict. ``ViTModel`` has no head, so it
    becomes a backbone (num_classes=0). Class names come from ``id2label`` (see
    ``load_huggingface_folder``).
    """
    model_type = config.get("model_type", "vit")
    if model_type != "vit":
        raise ModelLoadError(f"Hugging Face model_type {model_type!r} is not supported; only 'vit' is")
    if config.get("hidden_act", "gelu") != "gelu":
        raise ModelLoadError(f"hidden_act {config['hidden_act']!r} is not supported; vitviz's ViT uses exact 'gelu'")
    state_dict = {re.sub(r"^vit\.", "", name): t for name, t in state_dict.items()}
    state_dict = {name: t for name, t in state_dict.items() if not _HUGGINGFACE_UNUSED.search(name)}
    state_dict = _fuse_qkv(_rename(state_dict, _HUGGINGFACE_RULES, source="Hugging Face checkpoint"))
    has_head = "head.weight" in state_dict
    try:
        vit_config = ViTConfig(
            image_size=config.get("image_size", 224),
            patch_size=config.get("patch_size", 16),
            num_channels=config.get("num_channels", 3),
            hidden_size=config.get("hidden_size", 768),
            num_layers=config.get("num_hidden_layers", 12),
            num_heads=config.get("num_attention_heads", 12),
            mlp_size=config.get("intermediate_size", 3072),
            num_classes=state_dict["head.weight"].shape[0] if has_head else 0,
            dropout=config.get("hidden_dropout_prob", 0.0),
            attention_dropout=config.get("attention_probs_dropout_prob", 0.0),
            layer_norm_eps=config.get("layer_norm_eps", 1e-12),
            qkv_bias=config.get("qkv_bias", True),
        )
    except (TypeError, ValueError) as error:
        raise ModelLoadError(f"Hugging Face config cannot describe a vitviz ViT: {error}") from None
    return build_model(vit_config, state_dict, source="Hugging Face checkpoint")


def load_huggingface_folder(folder: str | Path) -> ViT:
    """A ready ViT from a folder saved by ``save_pretrained`` (config.json + weights).

    Reads model.safetensors (preferred) or pytorch_model.bin, and preprocessor_config.json
    when present (otherwise ViTImageProcessor's defaults: 224x224, bilinear, mean = std = 0.5).
    """
    folder = Path(folder)
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise ModelLoadError(f"{folder} has no config.json, so it is not a Hugging Face model folder")
    config = _read_json(config_path)
    if (folder / "model.safetensors").is_file():
        state_dict = read_safetensors(folder / "model.safetensors")
    elif (folder / "pytorch_model.bin").is_file():
        try:
            state_dict = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
        except Exception as error:  # any failure to unpickle means an unusable file
            raise ModelLoadError(f"{folder / 'pytorch_model.bin'} could not be read safely: {error}") from None
    else:
        raise ModelLoadError(f"{folder} has neither model.safetensors nor pytorch_model.bin (sharded weights?)")
    try:
        model = from_huggingface(state_dict, config)
        labels = config.get("id2label") or {}
        model.class_names = [str(labels.get(str(i), labels.get(i, f"class {i}"))) for i in range(model.config.num_classes)]
        model.transform = _huggingface_preprocessing(folder / "preprocessor_config.json")
    except ModelLoadError:
        raise
    except Exception as error:  # malformed configs or weights: a message, never a traceback
        raise ModelLoadError(f"{folder} is not a usable Hugging Face ViT folder: {error!r}") from None
    return model


def read_safetensors(path: str | Path) -> dict[str, torch.Tensor]:
    """Read a .safetensors file with torch alone (format: u64 header size, JSON header, raw data)."""
    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
              "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
              "U8": torch.uint8, "BOOL": torch.bool}  # fmt: skip
    data = Path(path).read_bytes()
    try:
        (header_size,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8 : 8 + header_size])
        if not isinstance(header, dict):
            raise ValueError("header is not a JSON object")
    except (struct.error, ValueError, UnicodeDecodeError):
        raise ModelLoadError(f"{path} is not a safetensors file (unreadable header)") from None
    body = memoryview(data)[8 + header_size :]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            start, end = info["data_offsets"]
            dtype, shape = dtypes[info["dtype"]], [int(n) for n in info["shape"]]
            if not 0 <= start <= end <= len(body):
                raise ValueError("data lies outside the file")
            flat = torch.frombuffer(bytearray(body[start:end]), dtype=dtype) if end > start else torch.empty(0, dtype=dtype)
            tensors[name] = flat.reshape(shape)
        except (KeyError, TypeError, ValueError, RuntimeError) as error:
            raise ModelLoadError(f"{path}: tensor {name} is malformed ({error!r})") from None
    return tensors


def _rename(state_dict: dict[str, torch.Tensor], rules: list[tuple[str, str]], source: str) -> dict:
    renamed = {}
    for name, tensor in state_dict.items():
        for pattern, replacement in rules:
            new_name, count = re.subn(f"^{pattern}", replacement, name)
            if count:
                renamed[new_name] = tensor
                break
        else:
            raise ModelLoadError(f"{source} has a weight vitviz does not know: {name}")
    return renamed


def _fuse_qkv(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """blocks.i.attn.{query,key,value}.{weight,bias} -> blocks.i.attn.qkv.{weight,bias} (q, k, v order)."""
    fused: dict[str, list] = {}
    out = {}
    for name, tensor in state_dict.items():
        match = re.fullmatch(r"(blocks\.\d+\.attn)\.(query|key|value|q|k|v)\.(weight|bias)", name)
        if match:
            parts = fused.setdefault(f"{match[1]}.qkv.{match[3]}", [None, None, None])
            parts[_QKV_PARTS[match[2]]] = tensor
        else:
            out[name] = tensor
    for name, parts in fused.items():
        if any(p is None for p in parts):
            raise ModelLoadError(f"incomplete query/key/value weights for {name}")
        out[name] = torch.cat(parts, dim=0)
    return out


def _read_json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"{path} is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise ModelLoadError(f"{path} does not hold a JSON object")
    return value


def _huggingface_preprocessing(path: Path) -> Preprocessing:
    settings = _read_json(path) if path.is_file() else {}
    size = settings.get("size", {"height": 224, "width": 224})
    if isinstance(size, int):
        size = {"height": size, "width": size}
    resize = size["shortest_edge"] if "shortest_edge" in size else (size["height"], size["width"])
    resample = {0: "nearest", 2: "bilinear", 3: "bicubic"}.get(settings.get("resample", 2), "bilinear")
    normalize = settings.get("do_normalize", True)
    return Preprocessing(
        resize=resize if settings.get("do_resize", True) else None,
        crop=None,
        mean=tuple(settings.get("image_mean", (0.5, 0.5, 0.5))) if normalize else (0.0, 0.0, 0.0),
        std=tuple(settings.get("image_std", (0.5, 0.5, 0.5))) if normalize else (1.0, 1.0, 1.0),
        interpolation=resample,
    )
