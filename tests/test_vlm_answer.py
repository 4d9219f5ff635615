"""vitviz.vlm's answers on the tiny VLM folders of every family: the recorded answer-token attention equals eager
``output_attentions`` of the same sequence, generation equals transformers' greedy ``generate``, a given answer is
teacher-forced, and bad folders, questions and images get one-line VLMErrors."""

import json
import shutil

import numpy as np
import pytest
import torch
from tiny_vlms import tiny_vlm_folder
from transformers import AutoModelForImageTextToText
from vlm_harness import QUESTION, TESTED, eager_model, photo

from vitviz.vlm import VLM, VLMError, load_vlm
from vitviz.vlm.recording import ROWS_ATTENTION, _softcapped_output, row_probabilities


@pytest.fixture(scope="module", params=TESTED)
def family(request, tmp_path_factory):
    folder = tiny_vlm_folder(request.param, tmp_path_factory)
    eager = eager_model(folder)
    return request.param, folder, load_vlm(folder), eager


def eager_rows(eager, answer) -> tuple[np.ndarray, np.ndarray]:
    """Eager attention of the answer's sequence: (n, layers, heads, T) rows at the answer's predicting positions,
    and the logits there."""
    with torch.no_grad():
        output = eager(**answer.inputs, output_attentions=True, use_cache=False)
    weights = torch.stack(output.attentions, dim=1)[0]  # (layers, heads, T, T)
    rows = torch.as_tensor(answer.rows)
    return weights[:, :, rows].permute(2, 0, 1, 3).numpy(), output.logits[0, rows].float()


@pytest.mark.parametrize("given", [None, "a red cat on the grass"])
def test_image_attention_equals_eager_output_attentions(family, given):
    _, _, vlm, eager = family
    answer = vlm.answer(photo(), QUESTION, answer=given, max_new_tokens=4)
    rows, logits = eager_rows(eager, answer)
    n, layers, heads = len(answer.token_ids), vlm.num_layers, vlm.num_heads
    assert n > 0 and answer.image_attention.dtype == np.float32
    assert answer.image_attention.shape == (n, layers, heads, len(answer.image_positions))
    expected = rows[..., answer.image_positions]
    np.testing.assert_allclose(answer.image_attention, expected, atol=1e-5, rtol=0)
    np.testing.assert_allclose(answer.image_share, expected.sum(-1), atol=1e-5, rtol=0)
    sink = len(answer.image_positions) if vlm.model_type == "paligemma" else 0  # PaliGemma's prompt: the image first
    assert answer.sink == sink and sink not in answer.image_positions
    np.testing.assert_allclose(answer.first_share, rows[..., sink], atol=1e-5, rtol=0)
    assert answer.image_attention.std() > 1e-3  # the weights differ between tokens: a real test of the columns
    # the answer's own log-probabilities, as the eager model gives them
    expected_logprobs = torch.log_softmax(logits, -1)[torch.arange(n), torch.tensor(answer.token_ids)]
    np.testing.assert_allclose(answer.logprobs, expected_logprobs.numpy(), atol=1e-4)


def test_image_tokens_are_the_image_token_positions(family):
    _, _, vlm, _ = family
    answer = vlm.answer(photo(), QUESTION, answer="a cat")
    ids = answer.input_ids[0].numpy()
    assert (ids[answer.image_positions] == vlm.image_token_id).all()
    assert len(answer.image_token_grid) == len(answer.image_positions)
    assert answer.answer_start + len(answer.token_ids) == len(ids)
    assert ids[answer.answer_start :].tolist() == answer.token_ids


def test_generation_equals_greedy_generate(family):
    _, _, vlm, _ = family
    image = photo(64, 64, seed=3)
    answer = vlm.answer(image, QUESTION, max_new_tokens=6)
    prompt = vlm.prompt_inputs(image, QUESTION)
    with torch.no_grad():
        output = vlm.model.generate(**prompt, do_sample=False, max_new_tokens=6)
    generated = output[0, prompt["input_ids"].shape[1] :].tolist()
    ends = vlm.model.generation_config.eos_token_id
    ends = {ends} if isinstance(ends, int) else set(ends)
    cut = next((i for i, token in enumerate(generated) if token in ends), len(generated))
    assert answer.generated and answer.token_ids == generated[:cut]
    assert answer.tokens == vlm.tokenizer.convert_ids_to_tokens(generated[:cut])
    # the teacher-forced pass of the generated answer predicts the same tokens
    assert np.all(answer.logprobs > np.log(0.5) - 10)  # finite
    forced = vlm.answer(image, QUESTION, answer=vlm.tokenizer.decode(answer.token_ids))
    if forced.token_ids == answer.token_ids:
        np.testing.assert_allclose(forced.image_attention, answer.image_attention, atol=1e-6)


def test_a_given_answer_is_teacher_forced(family):
    _, _, vlm, _ = family
    answer = vlm.answer(photo(), QUESTION, answer="a red cat")
    assert not answer.generated
    assert answer.token_ids == vlm.tokenizer("a red cat", add_special_tokens=False)["input_ids"]
    assert answer.tokens == ["a", "red", "cat"] and answer.text == "a red cat"
    shares = answer.image_share + answer.first_share + answer.text_share
    np.testing.assert_allclose(shares, 1.0, atol=1e-5)


def test_the_vision_tower_keeps_its_own_attention(family):
    _, _, vlm, _ = family
    config = vlm.model.config
    assert vlm.text_config._attn_implementation == ROWS_ATTENTION
    assert config.vision_config._attn_implementation != ROWS_ATTENTION


# ------------------------------------------------------------------------------------------- the attention rows
def direct_attention(query, key, value, mask, scaling, softcap):
    """Eager attention written out: repeated key/value heads, soft-capped logits, an additive mask."""
    group = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(group, 1), value.repeat_interleave(group, 1)
    scores = query @ key.transpose(-1, -2) * scaling
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    probs = torch.softmax(scores + mask, -1)
    return probs, (probs @ value).transpose(1, 2)


@pytest.mark.parametrize("softcap", [None, 5.0])
def test_row_probabilities_and_the_soft_capped_output_equal_direct_attention(softcap):
    torch.manual_seed(0)
    query, key, value = torch.randn(1, 6, 9, 8), torch.randn(1, 2, 9, 8), torch.randn(1, 2, 9, 8)
    allowed = torch.ones(9, 9).tril().bool()
    allowed[2:5, 2:5] = True  # a bidirectional block (PaliGemma's prefix, Gemma 3's image), and a sliding window
    allowed &= torch.ones(9, 9).triu(-4).bool()
    mask = torch.zeros(9, 9).masked_fill(~allowed, float("-inf"))[None, None]
    probs, output = direct_attention(query, key, value, mask, 0.3, softcap)
    module = torch.nn.Module()
    rows = torch.tensor([3, 7, 8])
    for given in (allowed[None, None], mask):  # a boolean mask, and an additive one
        got = row_probabilities(module, query, key, given, rows, 0.3, softcap)
        torch.testing.assert_close(got, probs[:, :, rows], atol=1e-6, rtol=0)
    causal = row_probabilities(module, query, key, None, rows, 0.3, softcap)  # no mask: causal
    torch.testing.assert_close(
        causal,
        direct_attention(
            query,
            key,
            value,
            torch.zeros(9, 9).masked_fill(~torch.ones(9, 9).tril().bool(), float("-inf")),
            0.3,
            softcap,
        )[0][:, :, rows],
        atol=1e-6,
        rtol=0,
    )
    if softcap is not None:
        got = _softcapped_output(module, query, key, value, mask, 0.3, softcap, None)
        torch.testing.assert_close(got, output, atol=1e-6, rtol=0)


# ------------------------------------------------------------------------------------------------------ errors
@pytest.fixture(scope="module")
def llava_folder(tmp_path_factory):
    return tiny_vlm_folder("llava", tmp_path_factory)


def copy_folder(source, target, drop=(), config=None):
    shutil.copytree(source, target)
    for name in drop:
        (target / name).unlink(missing_ok=True)
    if config:
        values = json.loads((target / "config.json").read_text())
        values.update(config)
        (target / "config.json").write_text(json.dumps(values))
    return target


def one_line(error) -> str:
    message = str(error.value)
    assert "\n" not in message and len(message) < 1000
    return message


def refusal(folder, **options) -> str:
    """The one-line VLMError with which ``load_vlm(folder, **options)`` refuses the folder."""
    with pytest.raises(VLMError) as error:
        load_vlm(folder, **options)
    return one_line(error)


def test_a_folder_without_a_processor_is_refused(llava_folder, tmp_path):
    folder = copy_folder(llava_folder, tmp_path / "m", drop=["processor_config.json", "preprocessor_config.json"])
    message = refusal(folder)
    assert "no processor" in message


def test_an_image_token_missing_from_the_tokenizer_is_refused(llava_folder, tmp_path):
    folder = copy_folder(llava_folder, tmp_path / "m")
    tokenizer = (folder / "tokenizer.json").read_text()
    (folder / "tokenizer.json").write_text(tokenizer.replace('"<image>"', '"<picture>"'))
    message = refusal(folder)
    assert "'<image>'" in message and "config expects token" in message
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    settings.pop("image_token")  # now no token of the tokenizer at all: "<image>" splits into pieces
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    message = refusal(folder)
    assert "not a token of its tokenizer" in message


def test_a_config_that_does_not_match_the_weights_is_refused(llava_folder, tmp_path):
    values = json.loads((llava_folder / "config.json").read_text())
    text = values["text_config"] | {"intermediate_size": 96}
    folder = copy_folder(llava_folder, tmp_path / "m", config={"text_config": text})
    message = refusal(folder)
    assert "do not match" in message or "do not fit" in message


def test_pickled_weights_and_unknown_families_are_refused(llava_folder, tmp_path):
    folder = copy_folder(llava_folder, tmp_path / "m", drop=["model.safetensors"])
    (folder / "pytorch_model.bin").write_bytes(b"not read")
    message = refusal(folder)
    assert "safetensors" in message
    other = copy_folder(llava_folder, tmp_path / "o", config={"model_type": "blip-2"})
    message = refusal(other)
    assert "'blip-2'" in message and "llava, " in message and "qwen2_vl" in message


def test_a_huge_config_is_refused_before_anything_is_built(llava_folder, tmp_path):
    values = json.loads((llava_folder / "config.json").read_text())
    text = values["text_config"] | {"vocab_size": 4_000_000_000}
    folder = copy_folder(llava_folder, tmp_path / "m", config={"text_config": text})
    message = refusal(folder)
    assert "memory free" in message


def test_bad_questions_images_and_precisions_get_one_line(llava_folder):
    vlm = load_vlm(llava_folder, precision="fp32")
    with pytest.raises(VLMError) as error:
        vlm.answer(photo(), "why " * 1000)
    assert "characters" in one_line(error)
    with pytest.raises(VLMError) as error:
        vlm.answer(np.zeros((4, 4), dtype=np.uint8), QUESTION)
    assert "(height, width, 3)" in one_line(error)
    with pytest.raises(VLMError):
        vlm.answer(photo(), QUESTION, max_new_tokens=0)
    with pytest.raises(VLMError) as error:
        vlm.answer(photo(), "what is <image> here ?")
    assert "holds the image token '<image>'" in one_line(error)
    with pytest.raises(VLMError) as error:
        vlm.answer(photo(), QUESTION, answer="a <image> cat")
    assert "the answer holds the image token" in one_line(error)
    assert "Answer(question=" in repr(vlm.answer(photo(), QUESTION, answer="a cat"))[:20]
    message = refusal(llava_folder, precision="fp8")
    assert "precision" in message
    assert load_vlm(llava_folder, precision="bf16").dtype == torch.bfloat16


def test_an_image_the_processor_rejects_gets_one_line(tmp_path_factory):
    vlm = load_vlm(tiny_vlm_folder("qwen2_vl", tmp_path_factory))
    with pytest.raises(VLMError) as error:
        vlm.answer(photo(width=600, height=2), QUESTION)  # Qwen refuses an aspect ratio over 200
    assert "rejected the image" in one_line(error)


def test_unreachable_attention_modules_are_named(llava_folder):
    vlm = load_vlm(llava_folder)
    layer = vlm.model.model.language_model.layers[1]
    attention = layer.self_attn
    del layer.self_attn
    with pytest.raises(VLMError) as error:
        VLM(vlm.model, vlm.processor, vlm.family)
    assert "cannot be reached" in one_line(error) and "layers 1 have no `self_attn`" in one_line(error)
    layer.self_attn = attention
    vlm.attention_modules[0] = torch.nn.Identity()  # an attention the interface never sees
    with pytest.raises(VLMError) as error:
        vlm.answer(photo(), QUESTION, answer="a cat")
    assert "layers 0 of LlavaForConditionalGeneration did not pass" in one_line(error)


def test_a_hub_model_loads_offline_from_the_cache_and_fails_fast_without_it(llava_folder, offline):
    message = refusal("hf:someone/tiny-vlm")
    assert str(offline) in message
    commit = "0" * 40
    repo = offline / "models--someone--tiny-vlm"
    shutil.copytree(llava_folder, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    vlm = load_vlm("hf:someone/tiny-vlm")
    assert vlm.model_type == "llava" and vlm.spec == "hf:someone/tiny-vlm"
    with pytest.raises(VLMError, match="not a Hugging Face repository id"):
        load_vlm("hf:../../etc")


def test_the_default_precision_is_the_stored_dtype():
    from vitviz.vlm.loading import model_dtype

    assert model_dtype(None, {"dtype": "bfloat16"}) == torch.bfloat16
    assert model_dtype(None, {"torch_dtype": "float16"}) == torch.float16
    assert model_dtype(None, {"text_config": {"dtype": "bfloat16"}}) == torch.bfloat16
    assert model_dtype(None, {}) == torch.float32
    assert model_dtype("fp32", {"dtype": "bfloat16"}) == torch.float32
    assert model_dtype("auto", {"dtype": "float32"}) == torch.float32


@pytest.mark.parametrize(
    ("family", "text"),
    [
        ("gemma3", {"sliding_window": 6, "attn_logit_softcapping": 20.0}),  # a window shorter than the image
        ("paligemma2", {"sliding_window": 6}),  # Gemma 2: soft-capped logits, and the window
    ],
)
def test_sliding_windows_and_soft_capped_logits_equal_eager(family, text, tmp_path):
    from tiny_vlms import make_tiny_vlm

    folder = make_tiny_vlm(family, tmp_path / family, text_config=text)
    eager = eager_model(folder)
    vlm = load_vlm(folder)
    answer = vlm.answer(photo(), QUESTION, answer="a red cat on the grass")
    rows, _ = eager_rows(eager, answer)
    assert len(answer.input_ids[0]) > 3 * text["sliding_window"]
    np.testing.assert_allclose(answer.image_attention, rows[..., answer.image_positions], atol=1e-5, rtol=0)
    first_layer = answer.image_attention[:, 0].sum(-1)  # layer 0 slides: the last rows see no image token
    assert first_layer[-1].max() == 0 and answer.image_attention[-1, 1].sum() > 0


def test_sharded_weights_load_and_a_hostile_index_is_refused_unread(llava_folder, tmp_path):
    folder = copy_folder(llava_folder, tmp_path / "sharded", drop=["model.safetensors"])
    AutoModelForImageTextToText.from_pretrained(llava_folder).save_pretrained(folder, max_shard_size="300KB")
    assert len(list(folder.glob("model-*.safetensors"))) > 1
    assert load_vlm(folder).answer(photo(), QUESTION, answer="a cat").image_attention.shape[0] == 2
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"] = {f"w{i}": "model-00001.safetensors" for i in range(100_000)}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    message = refusal(folder)
    assert "100,000 weights" in message and "no shard was read" in message


def test_an_answer_that_ends_at_once_has_no_tokens_and_empty_arrays(llava_folder, monkeypatch):
    vlm = load_vlm(llava_folder)
    monkeypatch.setattr(vlm, "generate", lambda inputs, max_new_tokens: [])  # the first token generated is the end
    answer = vlm.answer(photo(), QUESTION)
    assert answer.token_ids == [] and answer.text == "" and answer.logprobs.shape == (0,)
    assert answer.image_attention.shape == (0, vlm.num_layers, vlm.num_heads, len(answer.image_positions))
    assert answer.image_share.shape == (0, vlm.num_layers, vlm.num_heads)
