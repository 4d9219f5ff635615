"""Several sessions on one shared VLM at once (the dashboard keeps one loaded model for every browser session, and
Streamlit runs each session in its own thread): answers (greedy generation and the recorded pass), the logit lens
at every layer, relevance, knock-outs and the vision tower run from several threads on ONE model, a barrier making
the calls overlap, and each result equals the same call run alone. Nothing of a call is left on the model."""

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from tiny_vlms import tiny_vlm_folder
from vlm_harness import QUESTION, photo, red_cat

from vitviz.vlm import VLMError, answer_logprob, image_relevance, load_vlm, logit_lens
from vitviz.vlm.recording import ROWS_ATTENTION

FAMILIES = ["llava", "qwen2_vl", "idefics3"]  # a CLIP tower, M-RoPE (state on the model), SigLIP-like tiles
THREADS = 4
# The same kernels run in both cases; the tolerance only allows for torch splitting a reduction differently
# while other threads keep its intra-op pool busy. Token ids and words are compared exactly.
TOLERANCE = 1e-6


@pytest.fixture(scope="module", params=FAMILIES)
def shared(request, tmp_path_factory):
    vlm = load_vlm(tiny_vlm_folder(request.param, tmp_path_factory))
    return vlm, red_cat(vlm)


def jobs(vlm, answer) -> dict[str, object]:
    """Each call by name; each returns what the test compares (arrays, ids, or the VLMError's line)."""

    def asked(size: tuple[int, int], seed: int):
        asked = vlm.answer(photo(*size, seed=seed), QUESTION, max_new_tokens=4)
        return asked.token_ids, asked.image_attention, asked.image_share, asked.logprobs

    def lens(layer: int):
        words = logit_lens(answer, layer, k=3)
        return words.ids, words.probabilities

    def tower():
        try:
            return {name: tensor.numpy() for name, tensor in vlm.vision_tower().state_dict().items()}
        except VLMError as error:  # Qwen's tower is refused by name, the same way every time
            return str(error)

    # photos of two sizes: Qwen's position offsets (rope_deltas, kept on the model) differ between them
    sizes = {"answer 70 x 50": ((70, 50), 1), "answer 48 x 96": ((48, 96), 2)}
    calls = {name: lambda size=size, seed=seed: asked(size, seed) for name, (size, seed) in sizes.items()}
    calls |= {f"lens {layer}": lambda layer=layer: lens(layer) for layer in range(vlm.num_layers + 1)}
    calls |= {f"relevance {token}": lambda token=token: image_relevance(answer, token) for token in (0, 2)}
    removed = {"knock-out none": [], "knock-out half": list(range(0, len(answer.image_positions), 2))}
    calls |= {name: lambda r=r: answer_logprob(answer, r) for name, r in removed.items()}
    calls["tower"] = tower
    return calls


def assert_same(name: str, got, expected) -> None:
    if isinstance(expected, dict):
        assert got.keys() == expected.keys(), name
        for key in expected:
            assert_same(f"{name}: {key}", got[key], expected[key])
    elif isinstance(expected, (tuple, list)) and expected and not isinstance(expected[0], (int, np.integer)):
        assert len(got) == len(expected), name
        for index, (a, b) in enumerate(zip(got, expected, strict=True)):
            assert_same(f"{name} [{index}]", a, b)
    elif isinstance(expected, np.ndarray) and expected.dtype.kind == "f" or isinstance(expected, float):
        np.testing.assert_allclose(got, expected, atol=TOLERANCE, rtol=TOLERANCE, err_msg=name)
    elif isinstance(expected, np.ndarray):
        np.testing.assert_array_equal(got, expected, err_msg=name)
    else:
        assert got == expected, name


def model_state(vlm) -> tuple:
    """What a call could leave on the shared model: hooks, the attention implementation, gradient flags, mode."""
    hooks = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) + len(m._backward_hooks) for m in vlm.model.modules())
    flags = tuple(p.requires_grad for p in vlm.model.parameters())
    return hooks, vlm.text_config._attn_implementation, flags, vlm.model.training


def test_calls_at_once_on_one_model_equal_each_call_alone(shared):
    vlm, answer = shared
    calls = jobs(vlm, answer)
    before = model_state(vlm)
    expected = {name: call() for name, call in calls.items()}  # each call alone
    assert model_state(vlm) == before and before[1] == ROWS_ATTENTION
    names = list(calls)
    barrier = threading.Barrier(THREADS, timeout=120)

    def session(index: int) -> list[tuple[str, object]]:
        """Every call once, in an order of its own (a different call than the other threads' at each step),
        each step started with the other sessions'; an exception is a result, so no thread leaves the barrier."""
        results = []
        for step in range(len(names)):
            name = names[(index * 3 + step) % len(names)]
            barrier.wait()
            try:
                results.append((name, calls[name]()))
            except Exception as error:  # reported below with the call's name
                results.append((name, error))
        return results

    with ThreadPoolExecutor(THREADS) as pool:
        sessions = list(pool.map(session, range(THREADS)))
    failed = [(name, repr(result)) for results in sessions for name, result in results if isinstance(result, Exception)]
    assert not failed, failed
    for results in sessions:
        for name, result in results:
            assert_same(name, result, expected[name])
    assert model_state(vlm) == before
    assert torch.is_grad_enabled()
