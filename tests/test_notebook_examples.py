"""The example notebooks (examples/*.ipynb) run top to bottom in a real Jupyter kernel (nbclient), and their views'
state is what the library computes: a check cell, appended here, compares it in the same kernel."""

import json
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
WIDGET = "application/vnd.jupyter.widget-view+json"

CHECKS = {
    "photo.ipynb": """
import json, torch
pixels = model.transform(photo)[None]
with torch.no_grad():
    out = model(pixels, output_attentions=True)
p, (rows, cols) = out.num_prefix_tokens, out.grid_size
row = out.attentions[3][0, 2, p + 4 * cols + 4, p:]
print(json.dumps({"state": [view.method, view.layer, view.head, list(view.patch)], "values": len(view.values),
    "difference": float((torch.tensor(view.values) - row).abs().max()), "images": len(pair.frame["maps"])}))
""",
    "clip_prompts.ipynb": """
import json, torch
from vitviz.explain.registry import method_maps
explained = view.analyses.model
reference = method_maps(explained, explained.transform(photo)[None], ["relevance"], target=2).maps["relevance"]
print(json.dumps({"state": [view.method, view.target, explained.class_names], "values": len(view.values),
    "difference": float((torch.tensor(view.values) - reference.reshape(-1)).abs().max())}))
""",
    "vlm_answer.ipynb": """
import json, numpy as np
from vitviz.vlm import token_attention
reference = token_attention(answer, 1, 1, None)
print(json.dumps({"state": [view.mode, view.token, view.layer, view.head, answer.tokens], "values": len(view.values),
    "difference": float(np.abs(np.array(view.values) - reference).max())}))
""",
    "dataset_index.ipynb": """
import json, numpy as np
stored = index.maps(view.image_ids, "readout")
print(json.dumps({"state": [view.mode, view.kind, view.image, len(view.image_ids)], "values": len(view.values),
    "difference": float(np.abs(np.array(view.values) - stored[2].reshape(-1)).max())}))
""",
}
EXPECTED = {
    "photo.ipynb": {"state": ["attention", 3, 2, [4, 4]], "values": 64, "images": 2},
    "clip_prompts.ipynb": {
        "state": ["relevance", "a photo of the sea", ["a photo of a cat", "a photo of a dog", "a photo of the sea"]],
        "values": 16,
    },
    "dataset_index.ipynb": {"state": ["index", "readout", 2, 4], "values": 64},
    "vlm_answer.ipynb": {"state": ["answer", 1, 1, "mean", ["a", "red", "cat"]], "values": 16},
}


def test_every_example_notebook_is_checked():
    assert sorted(p.name for p in EXAMPLES.glob("*.ipynb")) == sorted(CHECKS)


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_an_example_runs_top_to_bottom_and_its_view_holds_the_librarys_values(name, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the prompts' text embeddings cache
    notebook = nbformat.read(EXAMPLES / name, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell(CHECKS[name]))
    where = {"metadata": {"path": str(EXAMPLES)}}  # the kernel starts in examples/, as a user's would
    NotebookClient(notebook, timeout=180, kernel_name="python3", resources=where).execute()
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    views = [o for o in outputs if WIDGET in o.get("data", {})]
    assert views and all("image/png" in o.data for o in views if o.output_type == "execute_result")
    found = json.loads(notebook.cells[-1].outputs[-1].text)
    assert found.pop("difference") < 1e-5
    assert found == EXPECTED[name]
