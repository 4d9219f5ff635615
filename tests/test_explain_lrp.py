"""AttnLRP and CP-LRP on vitviz's own blocks against LXT's rules applied to the source libraries' own models.

LXT 2.1 cannot be imported beside transformers 5 (its package imports removed transformers-4 internals) and pulls
bitsandbytes and accelerate, so it is not in the test lock: its efficient rules (lxt/efficient/rules.py and
patches.py) are written out here and patched onto torchvision's VisionTransformer, as LXT's ``cp_LRP`` map for
torchvision and its ``monkey_patch`` for Hugging Face models do, and onto transformers' own DINOv2 with registers:
- the identity rule on GELU (gradient f(x) / (x + 1e-10)), the LayerNorm's standard deviation held constant;
- CP-LRP: the attention's query and key inputs detached (LXT's cp_multi_head_attention_forward);
- AttnLRP: the queries' and keys' gradients divided by 4, the values' by 2 (LXT's wrap_attention_forward).
Relevance is x * dS/dx summed over channels, S the target's logit, as LXT's examples compute it.
"""

import pytest
import torch
import torch.nn.functional as F
import transformers as hf
from tiny_models import tiny_hf_config
from torchvision.models import VisionTransformer

from vitviz import from_huggingface, from_torchvision
from vitviz.explain import method_maps
from vitviz.explain.lrp import lrp_relevance


class LxtIdentity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, fn, x):
        out = fn(x)
        ctx.save_for_backward(out / (x + 1e-10))
        return out

    @staticmethod
    def backward(ctx, grad):
        return None, ctx.saved_tensors[0] * grad


class LxtDivide(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, factor):
        ctx.factor = factor
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad / ctx.factor, None


def lxt_layer_norm(self, x):
    mean = x.mean(dim=-1, keepdim=True)
    std = (((x - mean) ** 2).mean(dim=-1, keepdim=True) + self.eps).sqrt()
    y = (x - mean) / std.detach()
    if self.weight is not None:
        y = y * self.weight
    if self.bias is not None:
        y = y + self.bias
    return y


def lxt_relevance(model, pixels, target):
    x = pixels.clone().requires_grad_(True)
    logits = model(x)
    logits = getattr(logits, "logits", logits)
    logits[0, target].backward()
    return (x * x.grad).sum(1)


def rules_on_torchvision(monkeypatch, rules: str) -> None:
    gelu = torch.nn.GELU.forward
    monkeypatch.setattr(torch.nn.GELU, "forward", lambda self, x: LxtIdentity.apply(lambda t: gelu(self, t), x))
    monkeypatch.setattr(torch.nn.LayerNorm, "forward", lxt_layer_norm)
    attend = torch.nn.MultiheadAttention.forward
    if rules == "cp-lrp":  # lxt.efficient.patches.cp_multi_head_attention_forward
        monkeypatch.setattr(
            torch.nn.MultiheadAttention,
            "forward",
            lambda self, q, k, v, *a, **kw: attend(self, q.detach(), k.detach(), v, *a, **kw),
        )
        return

    def attnlrp(self, query, key, value, *args, **kwargs):  # torchvision's self-attention, q/4, k/4, v/2
        B, T, D = query.shape
        q, k, v = F.linear(query, self.in_proj_weight, self.in_proj_bias).chunk(3, dim=-1)
        q, k, v = (t.reshape(B, T, self.num_heads, D // self.num_heads).transpose(1, 2) for t in (q, k, v))
        q, k, v = LxtDivide.apply(q, 4), LxtDivide.apply(k, 4), LxtDivide.apply(v, 2)
        out = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, T, D)
        return self.out_proj(out), None

    monkeypatch.setattr(torch.nn.MultiheadAttention, "forward", attnlrp)


def torchvision_vit() -> VisionTransformer:
    torch.manual_seed(0)
    model = VisionTransformer(32, 8, num_layers=2, num_heads=4, hidden_dim=32, mlp_dim=64, num_classes=5)
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0, 0.3)
    return model.eval()


@pytest.mark.parametrize("rules", ["cp-lrp", "attnlrp"])
def test_lrp_equals_lxt_on_torchvision_s_vit(monkeypatch, rules):
    reference = torchvision_vit()
    ours = from_torchvision(reference).eval()
    pixels = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    found = lrp_relevance(ours, pixels, 3, rules)[0]
    by_name = method_maps(ours, pixels, [rules], target=3)
    with monkeypatch.context() as patched:
        rules_on_torchvision(patched, rules)
        expected = lxt_relevance(reference, pixels, 3)[0].detach()
    scale = expected.abs().max()
    torch.testing.assert_close(found / scale, expected / scale, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(by_name.pixels[rules], found)
    sums = expected.reshape(4, 8, 4, 8).sum(dim=(1, 3))
    torch.testing.assert_close(by_name.maps[rules] / scale, sums / scale, rtol=1e-4, atol=1e-4)
    plain = lxt_relevance(reference, pixels, 3)[0].detach()  # the rules change the map
    assert not torch.allclose(plain / scale, expected / scale, atol=1e-3)


def rules_on_dinov2(monkeypatch, rules: str) -> None:
    """LXT's monkey_patch for a Hugging Face model: the attention function wrapped, GELU and LayerNorm by rule."""
    from transformers import activations
    from transformers.models.dinov2_with_registers import modeling_dinov2_with_registers as module

    gelu = activations.GELUActivation.forward
    monkeypatch.setattr(
        activations.GELUActivation, "forward", lambda self, x: LxtIdentity.apply(lambda t: gelu(self, t), x)
    )
    monkeypatch.setattr(torch.nn.LayerNorm, "forward", lxt_layer_norm)
    attention = module.eager_attention_forward

    def wrapped(layer, query, key, value, *args, **kwargs):
        if rules == "cp-lrp":
            query, key = query.detach(), key.detach()
        else:
            query, key, value = LxtDivide.apply(query, 4), LxtDivide.apply(key, 4), LxtDivide.apply(value, 2)
        return attention(layer, query, key, value, *args, **kwargs)

    monkeypatch.setattr(module, "eager_attention_forward", wrapped)


@pytest.mark.parametrize("rules", ["cp-lrp", "attnlrp"])
def test_lrp_equals_lxt_on_transformers_dinov2_with_registers(monkeypatch, rules):
    torch.manual_seed(0)
    config = tiny_hf_config("dinov2_with_registers", num_labels=5, num_register_tokens=3)
    reference = hf.Dinov2WithRegistersForImageClassification(config).eval()
    with torch.no_grad():
        for param in reference.parameters():
            param.add_(torch.randn_like(param), alpha=0.3)
    ours = from_huggingface(reference.state_dict(), reference.config.to_dict()).eval()
    size = ours.config.image_hw
    pixels = torch.randn(1, 3, *size, generator=torch.Generator().manual_seed(2))
    found = lrp_relevance(ours, pixels, 1, rules)[0]
    with monkeypatch.context() as patched:
        rules_on_dinov2(patched, rules)
        expected = lxt_relevance(reference, pixels, 1)[0].detach()
    scale = expected.abs().max()
    torch.testing.assert_close(found / scale, expected / scale, rtol=1e-4, atol=1e-5)


def test_the_rules_are_off_outside_their_pass_and_their_map_follows_the_class():
    model = from_torchvision(torchvision_vit()).eval()
    pixels = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    before = model(pixels).logits
    maps = [method_maps(model, pixels, ["attnlrp", "cp-lrp"], target=t).maps for t in (0, 1)]
    torch.testing.assert_close(model(pixels).logits, before, rtol=0, atol=0)  # nothing stays patched
    for name in ("attnlrp", "cp-lrp"):
        assert not torch.allclose(maps[0][name], maps[1][name])
    with pytest.raises(ValueError, match="relevance rules are one of 'attnlrp', 'cp-lrp'"):
        lrp_relevance(model, pixels, 0, "lrp")
