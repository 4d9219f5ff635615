"""What a ViT carries besides its modules (class names, preprocessing, text tower, training record): declared with
their defaults, filled by the loaders, and kept out of the state dict, the parameters and ``.to()``; and the
``AttentionControls`` that ``block_arguments`` hands each block."""

import ast
import copy
import io
from pathlib import Path

import open_clip
import pytest
import torch
from tiny_text import clip_folder, open_clip_clip

import vitviz.model.vit
from vitviz import Preprocessing, ViT, ViTConfig, from_open_clip, load_model, save_checkpoint
from vitviz.model import AttentionControls
from vitviz.model.rotary import Rope

SIZES = dict(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_size=64)
TOKENIZER = open_clip.get_tokenizer("ViT-B-16")  # CLIP's BPE, shipped with open_clip: no download


@pytest.mark.parametrize("classes", [3, 0])
def test_a_fresh_vit_declares_every_attribute_with_its_default(classes):
    model = ViT(ViTConfig(**SIZES, num_classes=classes))
    assert model.class_names == [f"class {i}" for i in range(classes)]  # one per logit; none for a backbone
    assert model.transform is None
    assert model.text_tower is None and model.text_tower_note is None
    assert model.training_info == {}
    assert ViT(ViTConfig(**SIZES, num_classes=classes)).class_names is not model.class_names  # a list per model


def test_the_types_the_attributes_are_annotated_with_can_be_imported():
    """vit.py imports Preprocessing and TextTower for its annotations only, so a moved module would go unnoticed when
    the code runs: the guarded imports are run here."""
    tree = ast.parse(Path(vitviz.model.vit.__file__).read_text())
    guarded = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    names: dict = {}
    exec(compile(ast.Module(guarded.body, type_ignores=[]), "vit.py's typing-only imports", "exec"), names)
    assert names["Preprocessing"] is Preprocessing
    assert names["TextTower"].__name__ == "TextTower"


def test_the_loaders_fill_the_declared_attributes(tmp_path):
    preprocessing = Preprocessing(resize=32, crop=32, mean=(0.5,) * 3, std=(0.25,) * 3)
    save_checkpoint(
        tmp_path / "model.pt", ViT(ViTConfig(**SIZES, num_classes=2)), ["cat", "dog"], preprocessing, {"epochs": 1}
    )
    checkpoint = load_model(str(tmp_path / "model.pt"))
    assert checkpoint.class_names == ["cat", "dog"] and checkpoint.transform == preprocessing
    assert checkpoint.training_info == {"epochs": 1} and checkpoint.text_tower is None

    with_text = load_model(str(clip_folder(tmp_path / "clip")[2]))  # a Hugging Face CLIPModel folder
    assert with_text.class_names == [] and isinstance(with_text.transform, Preprocessing)
    assert with_text.text_tower.kind == "clip" and with_text.text_tower_note is None

    image_only = load_model(str(clip_folder(tmp_path / "no-tokenizer", save_tokenizer=False)[2]))
    assert image_only.text_tower is None and "no tokenizer files" in image_only.text_tower_note

    converted = from_open_clip(open_clip_clip(), TOKENIZER)
    assert converted.class_names == [] and isinstance(converted.transform, Preprocessing)
    assert converted.text_tower.kind == "clip" and converted.text_tower_note is None


def test_a_text_tower_stays_out_of_the_state_dict_parameters_and_moves():
    original = open_clip_clip()
    vit = from_open_clip(original, TOKENIZER)
    bare = ViT(vit.config)
    assert list(vit.state_dict()) == list(bare.state_dict())
    assert sum(p.numel() for p in vit.parameters()) == sum(p.numel() for p in bare.parameters())
    assert not any(module is original for module in vit.modules())
    buffer = io.BytesIO()
    torch.save(vit.state_dict(), buffer)
    buffer.seek(0)
    bare.load_state_dict(torch.load(buffer, weights_only=True))  # strict: exactly the image tower's keys
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(bare.eval()(images).pooled, vit(images).pooled, atol=0, rtol=0)
    vit.double()
    assert next(original.parameters()).dtype == torch.float32  # .to() moves the image tower alone


def test_copies_keep_the_attributes():
    vit = from_open_clip(open_clip_clip(), TOKENIZER)
    vit.class_names = ["red", "green"]
    twin = copy.deepcopy(vit)
    assert twin.class_names == vit.class_names and twin.class_names is not vit.class_names
    assert twin.transform == vit.transform and twin.text_tower.kind == "clip" and twin.text_tower is not vit.text_tower
    assert list(twin.state_dict()) == list(vit.state_dict())
    knocked = vit.knock_out(heads=[(0, 1)])  # shares every module and attribute
    assert knocked.text_tower is vit.text_tower and knocked.transform is vit.transform
    assert knocked.class_names is vit.class_names and list(knocked.state_dict()) == list(vit.state_dict())


def test_block_arguments_hand_each_block_its_rotary_embedding_and_its_slice_of_the_masks():
    model = ViT(ViTConfig(**SIZES, num_classes=3, rotary="eva", rotary_temperature=10000.0))
    heads = torch.ones(2, 2, 4)
    heads[1, 1, 3] = 0.0
    keys = torch.ones(2, 17, dtype=torch.bool)
    keys[0, 5] = False
    controls = model.knock_out(heads=[(0, 2)]).block_arguments((4, 4), 2, heads, keys, "mean")
    assert len(controls) == 2 and all(isinstance(c, AttentionControls) for c in controls)
    assert all(isinstance(c.rope, Rope) for c in controls)
    expected = heads.clone()
    expected[:, 0, 2] = 0.0  # the knocked-out model's own head, multiplied in
    for layer, block_controls in enumerate(controls):
        torch.testing.assert_close(block_controls.head_mask, expected[:, layer])
        assert torch.equal(block_controls.key_mask, keys) and block_controls.ablation == "mean"
    assert ViT(ViTConfig(**SIZES, num_classes=3)).block_arguments((4, 4), 2) == [AttentionControls()] * 2


@pytest.mark.parametrize("need_weights", [False, True])
def test_neutral_controls_leave_the_attention_as_trained(need_weights):
    torch.manual_seed(0)
    attention = ViT(ViTConfig(**SIZES, num_classes=3)).eval().blocks[0].attn
    x = torch.randn(2, 17, 32)
    neutral = AttentionControls(None, torch.ones(1, 4), torch.ones(2, 17, dtype=torch.bool), "mean")
    with torch.no_grad():
        plain = attention(x, need_weights=need_weights)
        controlled = attention(x, neutral, need_weights=need_weights)
    torch.testing.assert_close(controlled.out, plain.out)
