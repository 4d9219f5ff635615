"""The top-level API: what `import vitviz` gives and what it leaves unloaded."""

import subprocess
import sys

import vitviz


def test_import_vitviz_leaves_the_dataset_index_unloaded_until_asked():
    loaded = "print('vitviz.dataset' in sys.modules)"
    code = f"import sys, vitviz; {loaded}; vitviz.open_index; {loaded}"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.stdout.split() == ["False", "True"], result.stderr


def test_the_models_and_the_target_record_are_exported():
    from vitviz.dataset import open_index
    from vitviz.explain.target import Target
    from vitviz.model import Swin, ViT

    assert vitviz.Swin is Swin and vitviz.ViT is ViT and vitviz.Target is Target
    assert vitviz.open_index is open_index
    assert set(vitviz.__all__) <= set(dir(vitviz)) | {"open_index"}
