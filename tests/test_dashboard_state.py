"""The dashboard's explicit state: the model's key (what every cache that runs a model is keyed by), and the readout
captions keyed by the Readout enum."""

import dataclasses

import pytest

from vitviz.model.config import POOLINGS, ViTConfig
from vitviz_dashboard.names import READOUT_DESCRIPTIONS, READOUT_TITLES, Readout, readout_file_name, readout_kind
from vitviz_dashboard.page import ModelKey
from vitviz_dashboard.tabs.heads import READS


# every pooling, and [CLS] read with a distillation token by two heads (DeiT)
@pytest.mark.parametrize("pooling, distilled", [(pooling, False) for pooling in POOLINGS] + [("cls", True)])
def test_every_readout_of_the_config_has_its_captions(pooling, distilled):
    config = ViTConfig(
        pooling=pooling,
        class_token=pooling in ("cls", "cls+mean"),
        distillation_token=distilled,
        distillation_head=distilled,
    )
    kind = readout_kind(config)
    assert kind is (Readout.DISTILLED if distilled else Readout(pooling))
    assert kind in READOUT_DESCRIPTIONS and kind in READOUT_TITLES and kind in READS
    assert readout_file_name(config) == ("cls" if kind is Readout.CLS else "readout")


def test_captions_cover_exactly_the_readouts():
    assert set(READOUT_DESCRIPTIONS) == set(READOUT_TITLES) == set(READS) == set(Readout)


def test_the_model_key_keeps_knocked_out_and_prompted_models_apart_but_their_widget_values_together():
    plain = ModelKey("checkpoints/tiny.pt", "fp32")
    knocked = dataclasses.replace(plain, knocked_heads=((0, 1),), knocked_tokens=(0,))
    prompted = dataclasses.replace(plain, prompts=("a cat", "a dog"), templates=None)
    assert not plain.knocked_out and knocked.knocked_out
    assert knocked != plain  # the caches keep their results apart
    assert knocked.intact() == plain
    assert knocked.widget_scope == plain.widget_scope  # a knocked-out model keeps its model's widget values
    assert dataclasses.replace(plain, precision="bf16").widget_scope == plain.widget_scope
    assert prompted != plain and prompted.widget_scope != plain.widget_scope  # other classes: other widget values
    other_prompts = dataclasses.replace(prompted, prompts=("a cat", "a bird"))
    assert other_prompts.widget_scope not in (plain.widget_scope, prompted.widget_scope)
    assert dataclasses.replace(prompted, templates=("a photo of a {}.",)).widget_scope != prompted.widget_scope
