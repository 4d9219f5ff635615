"""Model sources as records: each module of vitviz/loading/sources/ declares one ModelSource; load_model, its
message for an unknown spec and the page's check of a typed spec read vitviz.loading.specs.SOURCES, and no code
outside vitviz/loading/ spells a source's prefix."""

from __future__ import annotations

from pathlib import Path

import pytest
from code_reading import code_strings

import vitviz
from vitviz.loading import ModelLoadError, load_model, specs
from vitviz.loading.sources.source import ModelSource
from vitviz_dashboard.sidebar.model_dirs import ModelRefused, check_hub_spec

ROOT = Path(__file__).resolve().parent.parent
PREFIXES = tuple(f"{source.prefix}:" for source in specs.SOURCES)


def test_every_source_has_its_own_prefix_and_usage():
    assert sorted(source.prefix for source in specs.SOURCES) == ["hf", "open_clip", "timm", "torchvision"]
    for source in specs.SOURCES:
        assert source.spec("x") == f"{source.prefix}:x" and source.owns(source.spec("x"))
        assert source.name(source.spec(" name ")) == "name"
        assert f"'{source.prefix}:" in source.usage


def test_load_model_dispatches_to_the_source_of_the_prefix(monkeypatch):
    model = vitviz.ViT(vitviz.ViTConfig(image_size=16, patch_size=8, hidden_size=16, num_layers=1, num_heads=2))
    asked = []
    toy = ModelSource("toy", lambda name: asked.append(name) or model, "'toy:<name>'", lambda name: name.isalnum())
    monkeypatch.setattr(specs, "SOURCES", (*specs.SOURCES, toy))
    assert load_model("toy: abc ") is model and asked == ["abc"]
    # one record is all a new source needs: the page takes its safe names and refuses the others
    assert check_hub_spec("toy:abc") == "toy:abc"
    with pytest.raises(ModelRefused, match="'toy:<name>'"):
        check_hub_spec("toy:../etc")
    with pytest.raises(ModelLoadError, match="'toy:<name>'"):
        load_model("no such thing at all")


def test_a_typed_spec_is_completed_by_the_sources():
    assert specs.typed_spec(" google/vit-base-patch16-224 ") == "hf:google/vit-base-patch16-224"
    assert specs.typed_spec("vit_small_patch8_224.dino") == "timm:vit_small_patch8_224.dino"
    assert specs.typed_spec("open_clip:ViT-B-16/openai") == "open_clip:ViT-B-16/openai"
    assert specs.typed_spec("  ") == ""


@pytest.mark.parametrize(
    ("spec", "safe"),
    [
        ("timm:vit_small_patch8_224.dino", True),
        ("timm:local-dir:/etc", False),
        ("timm:hf-hub:org/name", False),
        ("hf:google/vit-base-patch16-224", True),
        ("hf:../../etc", False),
        ("open_clip:ViT-B-16/openai", True),
        ("open_clip:hf-hub:timm/ViT-B-16-SigLIP", True),
        ("open_clip:local-dir:/etc", False),
        ("torchvision:vit_b_16", False),  # picked from the list, never typed
        ("/etc/passwd", False),
    ],
)
def test_each_source_says_which_typed_names_open_no_path(spec, safe):
    assert specs.names_no_path(spec) is safe


def test_no_code_outside_loading_spells_a_source_prefix():
    """Specs are built and parsed with the records (``TIMM.spec(name)``, ``specs.source_of``), never by a string
    that starts with "timm:", "hf:"...; help texts name the forms through ``specs.typed_usage()``."""
    outside = [
        path
        for top in ("vitviz", "vitviz_dashboard")
        for path in sorted((ROOT / top).rglob("*.py"))
        if "loading" not in path.relative_to(ROOT).parts
    ]
    found = {
        str(path.relative_to(ROOT)): text
        for path in outside
        for text in code_strings(path)
        if text.startswith(PREFIXES)
    }
    assert found == {}
