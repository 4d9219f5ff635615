"""Text towers: the text encoder and tokenizer of an image-text model (CLIP, SigLIP), from the library that trained
them, and what the image side needs to meet the text: the image projection, the logit scale and bias.

    HuggingFaceTextTower   transformers' CLIPTextModelWithProjection / SiglipTextModel with its AutoTokenizer
    OpenClipTextTower      an open_clip model's encode_text with open_clip's tokenizer

Neither re-implements a text transformer or a tokenizer: ``encode`` calls the library's own modules. Causal CLIP
towers read each batch only as far as its prompts reach (``vitviz.text.cut``: sorted by length, exact); SigLIP
reads its full-length padding without an attention mask, as big_vision trained it. A tower is
not an ``nn.Module`` attribute of the ViT (``model.text_tower`` is a plain object), so the ViT's state dict,
checkpoints and ``.to()`` stay those of the image tower.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Literal

import torch
from torch import nn

from vitviz.text.cut import causal_parts, encode_cut, in_length_groups

TowerKind = Literal["clip", "siglip"]


class TextTower:
    """Prompts in, text embeddings out; and how those meet the image's pooled vector.

    ``logits = logit_scale * cos(image_projection(pooled), text) + logit_bias``: CLIP has no bias and takes a
    softmax over the prompts; SigLIP has a bias and scores each prompt with its own sigmoid (``probabilities``).
    """

    def __init__(
        self,
        kind: TowerKind,
        context_length: int,
        logit_scale: torch.Tensor,
        logit_bias: torch.Tensor | None,
        image_projection: nn.Linear | None,
        source: str,
    ):
        if kind not in ("clip", "siglip"):
            raise ValueError(f"kind must be 'clip' or 'siglip'; got {kind!r}")
        self.kind = kind
        self.context_length = int(context_length)  # tokens the text encoder reads; longer prompts are truncated
        self.logit_scale = logit_scale.detach().float().reshape(())  # exp() of the stored log scale
        self.logit_bias = None if logit_bias is None else logit_bias.detach().float().reshape(())
        self.image_projection = image_projection  # (D -> E) shared by every zero-shot head of this tower
        self.source = source  # where it came from, in words (a spec or a class name)
        self._fingerprint: str | None = None

    @property
    def probabilities(self) -> Literal["softmax", "sigmoid"]:
        return "sigmoid" if self.kind == "siglip" else "softmax"

    def encode(self, texts: list[str]) -> torch.Tensor:
        """(N,) texts -> (N, E) text embeddings, not normalised: the library's own text forward."""
        raise NotImplementedError

    def token_count(self, text: str) -> int | None:
        """How many tokens ``text`` becomes, special tokens included (None if the tokenizer cannot say)."""
        raise NotImplementedError

    def modules(self) -> list[nn.Module]:
        """The modules whose weights make the text embeddings (for the fingerprint)."""
        raise NotImplementedError

    def tokenizer_identity(self) -> str:
        raise NotImplementedError

    @property
    def fingerprint(self) -> str:
        """A digest of every weight of the text encoder and of the tokenizer: text embeddings cached on disk under
        it belong to exactly these weights. Computed once (about a second for a 63 M-parameter tower)."""
        if self._fingerprint is None:
            digest = hashlib.sha256(self.tokenizer_identity().encode())
            for module in self.modules():
                for name, tensor in module.state_dict().items():
                    digest.update(name.encode())
                    data = tensor.detach().cpu().contiguous()
                    digest.update(str(data.dtype).encode())
                    digest.update(data.reshape(-1).view(torch.uint8).numpy().tobytes())
            self._fingerprint = digest.hexdigest()[:24]
        return self._fingerprint


class HuggingFaceTextTower(TextTower):
    """transformers' text half of a CLIPModel or SiglipModel, with its AutoTokenizer.

    CLIP prompts are padded to the longest of their group, with an attention mask, as ``CLIPProcessor`` pads a
    batch; sorted by length first (``in_length_groups``), so a group's padding is short. SigLIP prompts are padded to
    the text model's ``max_position_embeddings`` (``padding="max_length"``), as its model cards instruct, and read
    without an attention mask, as big_vision trained it: the padding (its end-of-text token) is read, and the
    embedding is pooled at the last position (open_clip #984). SiglipTokenizer returns a mask; it is dropped.
    """

    def __init__(
        self,
        text_model: nn.Module,
        tokenizer,
        kind: TowerKind,
        logit_scale: torch.Tensor,
        logit_bias: torch.Tensor | None,
        image_projection: nn.Linear | None,
        source: str,
    ):
        context = text_model.config.max_position_embeddings
        super().__init__(kind, context, logit_scale, logit_bias, image_projection, source)
        self.text_model = text_model.eval()
        self.tokenizer = tokenizer

    def encode(self, texts: list[str]) -> torch.Tensor:
        if self.kind == "siglip":
            batch = self.tokenizer(
                list(texts), padding="max_length", truncation=True, max_length=self.context_length, return_tensors="pt"
            )
            return self.text_model(input_ids=batch["input_ids"]).pooler_output  # no attention_mask: as trained
        batch = self.tokenizer(
            list(texts), padding=True, truncation=True, max_length=self.context_length, return_tensors="pt"
        )
        ids, mask = batch["input_ids"], batch["attention_mask"]

        def run(rows: torch.Tensor, length: int) -> torch.Tensor:
            return self.text_model(input_ids=ids[rows, :length], attention_mask=mask[rows, :length]).text_embeds

        return in_length_groups(mask.sum(dim=1), run)

    def token_count(self, text: str) -> int | None:
        return len(self.tokenizer(text)["input_ids"])

    def modules(self) -> list[nn.Module]:
        return [self.text_model]

    def tokenizer_identity(self) -> str:
        vocab = self.tokenizer.get_vocab()
        digest = hashlib.sha256(repr(sorted(vocab.items())).encode()).hexdigest()
        return f"{type(self.tokenizer).__name__}|{len(vocab)}|{digest}"


class OpenClipTextTower(TextTower):
    """An open_clip model's text side: ``model.encode_text(tokenizer(texts))``; for a causal CLIP tower, the same
    modules run only up to each group's longest prompt (``vitviz.text.cut``), which gives the same embeddings.

    The open_clip model keeps only its text parts: its image tower (``visual``) is replaced by an empty module
    once vitviz's ViT holds the converted copy, so the weights are not held twice.
    """

    def __init__(self, clip_model: nn.Module, tokenizer: Callable, image_projection: nn.Linear | None, source: str):
        bias = getattr(clip_model, "logit_bias", None)
        context = getattr(tokenizer, "context_length", None) or getattr(clip_model, "context_length", None) or 77
        kind: TowerKind = "siglip" if bias is not None else "clip"
        super().__init__(kind, context, clip_model.logit_scale.exp(), bias, image_projection, source)
        self.clip_model = clip_model.eval()
        self.tokenizer = tokenizer
        self.causal = causal_parts(clip_model)  # None: the tower reads its padding (SigLIP), so it runs at full length
        self.cut = self.causal is not None  # False runs every tower at full length (the benchmark's "before")

    def encode(self, texts: list[str]) -> torch.Tensor:
        tokens = self.tokenizer(list(texts))
        if not self.cut or self.causal is None or tokens.shape[1] != self.causal.source.positional_embedding.shape[0]:
            return self.clip_model.encode_text(tokens)
        return encode_cut(self.causal, tokens)

    def token_count(self, text: str) -> int | None:
        from open_clip.tokenizer import HFTokenizer, SimpleTokenizer

        if isinstance(self.tokenizer, SimpleTokenizer) and self.tokenizer.reduction_fn is None:
            return len(self.tokenizer.encode(text)) + 2  # start and end of text
        if isinstance(self.tokenizer, HFTokenizer):
            return len(self.tokenizer.tokenizer(self.tokenizer.clean_fn(text))["input_ids"])
        return None

    def modules(self) -> list[nn.Module]:
        return [self.clip_model]

    def tokenizer_identity(self) -> str:
        probe = self.tokenizer(["a photo of a dog.", "vitviz"])
        return f"{type(self.tokenizer).__name__}|{probe.tolist()}"


def huggingface_text_tower(
    state_dict: Mapping[str, torch.Tensor], config: Mapping, tokenizer, source: str
) -> HuggingFaceTextTower:
    """The text tower of a Hugging Face ``clip`` or ``siglip`` checkpoint (config.json as a dict, and its weights),
    built with transformers from the checkpoint's own ``text_config`` and loaded strictly."""
    import transformers

    model_type = config.get("model_type")
    if model_type == "clip":
        clip_config = transformers.CLIPConfig.from_dict(dict(config))
        text_config = clip_config.text_config
        text_config.projection_dim = clip_config.projection_dim  # CLIPModel's text_projection is sized by the top level
        text_model = transformers.CLIPTextModelWithProjection(text_config)
        names = ("text_model.", "text_projection.")
    elif model_type == "siglip":
        text_config = transformers.SiglipConfig.from_dict(dict(config)).text_config
        text_model = transformers.SiglipTextModel(text_config)
        names = ("text_model.",)
    else:
        raise ValueError(f"model_type {model_type!r} has no text tower vitviz can load (clip, siglip)")
    weights = {k: v for k, v in state_dict.items() if k.startswith(names)}
    if not any(
        k.startswith("text_model.") for k in text_model.state_dict()
    ):  # the model is the text transformer itself
        weights = {k.removeprefix("text_model."): v for k, v in weights.items()}
    weights = {k: v for k, v in weights.items() if not k.endswith("position_ids")}  # a buffer older files store
    missing, unexpected = text_model.load_state_dict(weights, strict=False)
    missing = [k for k in missing if not k.endswith("position_ids")]
    if missing or unexpected:
        raise ValueError(
            f"the text weights do not fit the text config: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    projection = None
    if "visual_projection.weight" in state_dict:  # CLIP: pooled image vector -> the shared space
        weight = state_dict["visual_projection.weight"]
        projection = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
        projection.weight.data.copy_(weight)
    return HuggingFaceTextTower(
        text_model,
        tokenizer,
        model_type,
        state_dict["logit_scale"].exp(),
        state_dict.get("logit_bias"),
        projection,
        source,
    )
