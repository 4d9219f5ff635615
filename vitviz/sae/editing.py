"""Editing a model through an SAE: one block's output on the patch tokens changed along chosen latents.

``with_sae(model, sae, block, scale={j: 0})`` returns a model sharing every weight of ``model`` (``ViT.sharing_copy``)
whose block ``block`` is an ``EditedBlock``: the same norms, attention and MLP, followed by the edit

    h  ->  h + decode(edited codes) - decode(codes)        on the patch tokens; prefix tokens ([CLS], registers) kept

so the SAE's reconstruction error stays in h and an edit that changes nothing leaves the model exactly as it was.
Because the edit lives in the block module itself, every pass through the blocks carries it: ``model(x)``, the
explanation methods that run the blocks one by one (Grad-CAM, facets, head importance) and knock-outs made on the
edited model. The same mechanism replaces h by the SAE's reconstruction (``replace_with``), which the metrics use.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Mapping

import torch
from torch import nn

from vitviz.model import ViT
from vitviz.model.layers import Block, BlockOutput
from vitviz.sae.errors import SAEError
from vitviz.sae.model import TopKSAE

Edit = Callable[[torch.Tensor], torch.Tensor]  # patch tokens (B, N, D) -> their replacement (B, N, D)


class EditedBlock(Block):
    """A block sharing another block's modules whose output's patch tokens go through ``edits`` in turn."""

    def __init__(self, block: Block, edits: tuple[Edit, ...], num_prefix_tokens: int):
        nn.Module.__init__(self)
        inner = block.inner if isinstance(block, EditedBlock) else block
        for name, module in inner.named_children():
            self.add_module(name, module)
        self.train(block.training)
        self.__dict__["inner"] = inner  # the unedited block, not registered: its modules are already ours
        self.edits = (block.edits if isinstance(block, EditedBlock) else ()) + edits
        self.num_prefix_tokens = num_prefix_tokens

    def forward(self, x: torch.Tensor, *args, **kwargs) -> BlockOutput:
        output = super().forward(x, *args, **kwargs)
        hidden = output.hidden
        p = self.num_prefix_tokens
        patches = hidden[:, p:]
        for edit in self.edits:
            patches = edit(patches)
        return output._replace(hidden=torch.cat([hidden[:, :p], patches], dim=1))  # (B, T, D)


def edited_model(model: ViT, block: int, edit: Edit) -> ViT:
    """A model sharing every weight of ``model`` whose block ``block`` output's patch tokens go through ``edit``."""
    layers = len(model.blocks)
    if not -layers <= block < layers:
        raise SAEError(f"block must be in [0, {layers - 1}]; got {block}")
    new = model.sharing_copy()
    blocks = list(model.blocks)
    blocks[block % layers] = EditedBlock(blocks[block % layers], (edit,), model.config.num_prefix_tokens)
    new.blocks = nn.ModuleList(blocks)
    return new


def _check_sae(model: ViT, sae: TopKSAE, latents: Mapping[int, float]) -> None:
    if sae.config.d_in != model.config.hidden_size:
        raise SAEError(
            f"the SAE reads {sae.config.d_in}-wide tokens; this model's blocks output "
            f"{model.config.hidden_size}-wide ones"
        )
    bad = sorted(j for j in latents if not 0 <= j < sae.config.latents)
    if bad:
        raise SAEError(f"latent {bad[0]} is out of range: this SAE has latents 0 to {sae.config.latents - 1}")


def _warn_other_block(model: ViT, sae: TopKSAE, block: int) -> None:
    """A warning when ``block`` is not the block the SAE's file says it read, or names one this model lacks (its
    codes elsewhere mean little; the block given is edited all the same)."""
    layers = model.config.num_layers
    try:
        own = sae.block_for(layers)
    except SAEError as error:
        warnings.warn(f"{error}; editing block {block % layers}'s output instead", UserWarning, stacklevel=3)
        return
    if own is not None and own != block % layers:
        warnings.warn(
            f"the SAE was trained on block {own}'s output; editing block {block % layers}'s instead",
            UserWarning,
            stacklevel=3,
        )


def _moved(sae: TopKSAE, device: torch.device) -> TopKSAE:
    """The SAE on the model's device: itself when it is there already, else a copy (the caller's stays put)."""
    if sae.W_enc.device == device:
        return sae
    return copy.deepcopy(sae).to(device).eval()  # any SAE class vitviz loads (vitviz.sae.formats)


def with_sae(
    model: ViT,
    sae: TopKSAE,
    block: int,
    scale: Mapping[int, float] | None = None,
    set_to: Mapping[int, float] | None = None,
) -> ViT:
    """A model sharing every weight of ``model`` whose block ``block`` output on the patch tokens is
    h + decode(edited codes) - decode(codes), with latent j's code multiplied by ``scale[j]`` (0 suppresses it, 2
    doubles it) or set to ``set_to[j]`` on every patch (saev's protocol: -2 x its largest activation, see
    ``vitviz.sae.metrics.largest_activations``). Codes are in the SAE's normalised units. ``model`` is unchanged."""
    scale, set_to = dict(scale or {}), dict(set_to or {})
    _check_sae(model, sae, scale | set_to)
    _warn_other_block(model, sae, block)
    sae = _moved(sae, next(model.parameters()).device)
    chosen = sorted(scale | set_to)
    index = torch.tensor(chosen, dtype=torch.long, device=sae.W_dec.device)
    factors = torch.tensor([scale.get(j, 1.0) for j in chosen], device=sae.W_dec.device)
    fixed = torch.tensor([set_to.get(j, float("nan")) for j in chosen], device=sae.W_dec.device)

    def edit(patches: torch.Tensor) -> torch.Tensor:  # (B, N, D)
        if not chosen:
            return patches
        codes = sae.encode(patches)[..., index]  # (B, N, chosen) only the edited latents matter
        edited = torch.where(fixed.isnan(), codes * factors, fixed)
        change = sae.decoded_change(edited - codes, index, patches)  # decode(edited) - decode(codes): (B, N, D)
        return patches + change.to(patches.dtype)

    return edited_model(model, block, edit)


def replace_with(model: ViT, sae: TopKSAE | None, block: int) -> ViT:
    """A model whose block ``block`` output's patch tokens are replaced by the SAE's reconstruction, or by zeros
    (``sae=None``: the zero ablation of "CE loss recovered"). Prefix tokens are kept."""
    if sae is None:
        return edited_model(model, block, torch.zeros_like)
    _check_sae(model, sae, {})
    sae = _moved(sae, next(model.parameters()).device)
    return edited_model(model, block, lambda patches: sae(patches).to(patches.dtype))
