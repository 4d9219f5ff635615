"""torchvision ViTs convert exactly (random weights, no downloads)."""

import pytest
import torch
import torchvision

from vitviz.loading import from_torchvision

ATOL = 1e-4  # the bound for logits


def randomise_torchvision_head(model):
    # torchvision starts its head at zero, which would make every logit 0 and the comparison empty
    torch.manual_seed(1)
    torch.nn.init.normal_(model.heads.head.weight, std=0.05)
    torch.nn.init.normal_(model.heads.head.bias, std=0.05)
    return model.eval()


def test_full_size_vit_b_16_reproduces_torchvision_logits():
    torch.manual_seed(0)
    reference = randomise_torchvision_head(torchvision.models.vit_b_16())
    model = from_torchvision(reference)
    images = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        expected = reference(images)
        fused = model(images).logits
        explicit = model(images, output_attentions=True).logits
    assert expected.abs().max() > 0.1  # a meaningful comparison, not zeros against zeros
    assert (fused - expected).abs().max() <= ATOL
    assert (explicit - expected).abs().max() <= ATOL
    assert model.config.grid_size == (14, 14) and model.config.num_heads == 12


# each architecture's widths (hidden, MLP): ViT-B/32 is built whole by torchvision; the larger ones at their full
# widths with three of their blocks, since the conversion is per block (ViT-H/14's 32 blocks took 13 s to build)
WIDTHS = {"vit_l_16": (1024, 4096), "vit_l_32": (1024, 4096), "vit_h_14": (1280, 5120)}


@pytest.mark.parametrize(
    "arch,size,patch,heads",
    [("vit_b_32", 64, 32, 12), ("vit_l_16", 32, 16, 16), ("vit_l_32", 64, 32, 16), ("vit_h_14", 28, 14, 16)],
)
def test_every_torchvision_vit_architecture_converts(arch, size, patch, heads):
    # full widths; a small image keeps the forward cheap
    torch.manual_seed(0)
    if arch in WIDTHS:
        hidden, mlp = WIDTHS[arch]
        built = torchvision.models.VisionTransformer(size, patch, 3, heads, hidden, mlp)
    else:
        built = torchvision.models.get_model(arch, image_size=size)
    reference = randomise_torchvision_head(built)
    model = from_torchvision(reference)
    assert (model.config.patch_size, model.config.num_heads) == (patch, heads)
    assert model.config.num_layers == len(reference.encoder.layers)
    images = torch.randn(1, 3, size, size)
    with torch.no_grad():
        assert (model(images, output_attentions=True).logits - reference(images)).abs().max() <= ATOL


def test_torchvision_conversion_refuses_other_models():
    with pytest.raises(TypeError, match="VisionTransformer"):
        from_torchvision(torch.nn.Linear(2, 2))
