"""``VLM``: a transformers vision-language model, its processor and its family's layout, ready to be asked.

``load_vlm`` (loading.py) builds it. It finds the language model's attention modules (one per layer), switches the
text config's attention to ``rows_attention`` (recording.py: SDPA's output, and the answer rows when recording;
the vision tower keeps its own), builds prompts with the processor's chat template, generates greedily, and runs
the recorded teacher-forced pass (``record``) that ``answer`` (answer.py) and later methods read.

One VLM may serve several threads at once (the dashboard's sessions share the model it loaded), and needs no lock:
after ``__init__`` nothing vitviz does changes the model. What a call records or intercepts is found in context
variables of the thread that runs it (recording.py, passes.py), hooks act for the thread that set them
(``passes.hooked``), and the model stays in eval mode with its weights' gradient flags untouched. Qwen's models keep
the last prompt's ``rope_deltas`` on the model, but transformers (5.x) computes them anew in every pass without a
cache, and ``generate`` carries each call's own position ids from step to step, so neither reads another's.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from vitviz.model import ViT
from vitviz.vlm.answer import Answer
from vitviz.vlm.errors import VLMError
from vitviz.vlm.layouts import Family, ImageLayout, LayoutInputs
from vitviz.vlm.recording import ROWS_ATTENTION, Recording, recording, register_rows_attention
from vitviz.vlm.tower import vision_tower

MAX_QUESTION_CHARS = 2000  # characters of a question
MAX_NEW_TOKENS = 1024  # the most tokens one answer may generate
MAX_ANSWER_TOKENS = 1024  # the most tokens a given answer may hold


def language_layers(model: torch.nn.Module) -> tuple[Any, torch.nn.Module, list[torch.nn.Module]]:
    """The text config, the language model (the sub-model whose config is the text config and which holds
    ``layers``) and the attention module of each of its layers; a VLMError that says what is missing otherwise."""
    from transformers import PreTrainedModel

    text_config = model.config.get_text_config()
    name = type(model).__name__
    candidates = [
        module
        for module in model.modules()
        if isinstance(module, PreTrainedModel) and module.config is text_config and module is not model
    ]
    language = next((m for m in candidates if isinstance(getattr(m, "layers", None), torch.nn.ModuleList)), None)
    if language is None:
        raise VLMError(
            f"the attention modules of {name} cannot be reached: no language model with a list of `layers` "
            "was found under it"
        )
    attentions = [getattr(layer, "self_attn", None) for layer in language.layers]
    missing = [index for index, module in enumerate(attentions) if module is None]
    if missing or not attentions:
        raise VLMError(
            f"the attention modules of {name} cannot be reached: {type(language).__name__}'s layers "
            f"{', '.join(map(str, missing)) or '(none)'} have no `self_attn`"
        )
    return text_config, language, attentions


class VLM:
    """A loaded vision-language model. ``model`` and ``processor`` are transformers' own objects; ``family`` the
    layout record of its model type. ``answer(image, question)`` asks it (see answer.py)."""

    def __init__(self, model: torch.nn.Module, processor: Any, family: Family, spec: str = ""):
        self.model = model.eval()
        self.processor = processor
        self.family = family
        self.spec = spec
        self.tokenizer = processor.tokenizer
        self.text_config, self.language_model, self.attention_modules = language_layers(model)
        register_rows_attention()
        self.text_config._attn_implementation_internal = ROWS_ATTENTION  # the text config only: not the vision tower
        self.image_token_id = image_token_id(model.config, self.tokenizer)

    @property
    def model_type(self) -> str:
        return self.family.model_type

    @property
    def num_layers(self) -> int:
        return len(self.attention_modules)

    @property
    def num_heads(self) -> int:
        return int(self.text_config.num_attention_heads)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    def vision_tower(self) -> ViT:
        """The vision tower as a vitviz ViT (CLIP, SigLIP, Idefics3's), its transform the processor's preprocessing
        of the base image; a VLMError naming the family where vitviz cannot read it (Qwen's). See tower.py."""
        return vision_tower(self)

    def answer(self, image: Any, question: str, *, answer: str | None = None, max_new_tokens: int = 32) -> Answer:
        """Ask ``question`` about ``image`` (a PIL image, an RGB uint8 array or a path): generate the answer (greedy,
        ``max_new_tokens`` at most, up to the first end-of-sequence token) or teacher-force ``answer``; then record
        the answer rows' attention in one pass of the whole sequence."""
        photo = as_photo(image)
        prompt = self.prompt_inputs(photo, question)
        layout, image_positions = self.layout(prompt, photo.size)
        answer_ids = self.generate(prompt, max_new_tokens) if answer is None else self.answer_tokens(answer)
        start = prompt["input_ids"].shape[1]
        ids = torch.tensor(answer_ids, dtype=torch.long)
        inputs = self.with_answer(prompt, ids)
        rows = torch.arange(len(answer_ids)) + start - 1
        record, logits = self.record(inputs, rows, image_positions)
        weights, image_share, first_share = (t.numpy() for t in record.stacked())
        logprobs = torch.log_softmax(logits, dim=-1)[torch.arange(len(answer_ids)), ids]
        return Answer(
            question=question,
            text=self.tokenizer.decode(answer_ids, skip_special_tokens=True),
            token_ids=list(answer_ids),
            tokens=self.tokenizer.convert_ids_to_tokens(answer_ids),
            image_attention=weights,
            image_share=image_share,
            first_share=first_share,
            logprobs=logprobs.numpy(),
            image_token_grid=layout.grid,
            tiles=layout.tiles,
            photo_size=photo.size,
            generated=answer is None,
            model=self,
            inputs=inputs,
            image_positions=np.asarray(image_positions, dtype=np.int64),
            sink=sink_position(image_positions),
            answer_start=start,
        )

    def answer_tokens(self, answer: str) -> list[int]:
        """A given answer's token ids, as the tokenizer gives them without special tokens."""
        if not isinstance(answer, str):
            raise VLMError(f"the answer must be text, not {type(answer).__name__}")
        ids = self.tokenizer(answer, add_special_tokens=False)["input_ids"]
        if not ids:
            raise VLMError("the answer holds no token")
        if self.image_token_id in ids:
            raise VLMError("the answer holds the image token: an answer is text only")
        if len(ids) > MAX_ANSWER_TOKENS:
            raise VLMError(f"the answer has {len(ids):,} tokens, more than the {MAX_ANSWER_TOKENS:,} allowed")
        return list(ids)

    # ------------------------------------------------------------------------------------------------ the prompt
    def prompt(self, question: str) -> str:
        """The prompt text before the processor expands the image: the chat template on one user message (an image,
        then the question) with the generation prompt, or the question itself where the processor builds it."""
        if not isinstance(question, str):
            raise VLMError(f"the question must be text, not {type(question).__name__}")
        if len(question) > MAX_QUESTION_CHARS:
            raise VLMError(
                f"the question has {len(question):,} characters, more than the {MAX_QUESTION_CHARS:,} allowed"
            )
        marks = {getattr(self.processor, "image_token", None), getattr(self.tokenizer, "image_token", None)}
        held = sorted(mark for mark in marks if isinstance(mark, str) and mark in question)
        if held:
            raise VLMError(f"the question holds the image token {held[0]!r}: the image is placed by vitviz, not in it")
        if not self.family.chat_template:  # the processor adds its own (PaliGemma: bos, and a line break after)
            return self.processor.image_token + question
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question}]}]
        try:
            return self.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        except Exception as error:
            raise VLMError(f"the processor's chat template failed: {type(error).__name__}: {error}") from None

    def prompt_inputs(self, image: Image.Image, question: str) -> dict[str, torch.Tensor]:
        """The processor's outputs for the prompt and the photo, as tensors on the model's device (floating ones in
        its dtype); a VLMError when the processor rejects the image."""
        text = self.prompt(question)
        bos = self.tokenizer.bos_token
        special = {} if not self.family.chat_template else {"add_special_tokens": not (bos and text.startswith(bos))}
        try:
            inputs = self.processor(text=[text], images=[image], return_tensors="pt", **special)
        except Exception as error:
            raise VLMError(f"the processor rejected the image: {type(error).__name__}: {error}") from None
        return {
            key: value.to(self.device, self.dtype if value.is_floating_point() else None)
            for key, value in inputs.items()
            if isinstance(value, torch.Tensor) and key != "labels"  # PaliGemma's, for training
        }

    def layout(self, inputs: dict[str, torch.Tensor], photo_size: tuple[int, int]) -> tuple[ImageLayout, np.ndarray]:
        """The family's layout of the prompt's image tokens, and their positions in the sequence (image-newline
        positions left out)."""
        slots = (inputs["input_ids"][0] == self.image_token_id).nonzero().flatten().cpu().numpy()
        if not len(slots):
            raise VLMError("the prompt holds no image token: the processor did not place the image")
        found = self.family.layout(LayoutInputs(inputs, photo_size, self.model.config, self.processor, len(slots)))
        return found, slots[found.is_image]

    def with_answer(self, inputs: dict[str, torch.Tensor], answer_ids: torch.Tensor) -> dict[str, torch.Tensor]:
        """The prompt's inputs followed by the answer's tokens (teacher forcing): every per-token input extended,
        the answer's token types as the family marks generated tokens."""
        length = inputs["input_ids"].shape[1]
        extended = {}
        for key, value in inputs.items():
            if value.dim() == 2 and value.shape == (1, length) and key != "pixel_attention_mask":
                if key == "input_ids":
                    fill = answer_ids.to(value)
                elif key == "attention_mask":
                    fill = torch.ones_like(answer_ids).to(value)
                elif key in self.family.answer_token_types:
                    fill = torch.full_like(answer_ids, self.family.answer_token_types[key]).to(value)
                else:
                    raise VLMError(f"the processor returned a per-token input {key!r} vitviz cannot extend")
                value = torch.cat([value, fill.reshape(1, -1)], dim=1)
            extended[key] = value
        return extended

    # --------------------------------------------------------------------------------------------- the passes
    def generate(self, inputs: dict[str, torch.Tensor], max_new_tokens: int) -> list[int]:
        """Greedy generation with the KV cache (transformers' ``generate``, do_sample=False), up to and without the
        first end-of-sequence token."""
        if not 1 <= max_new_tokens <= MAX_NEW_TOKENS:
            raise VLMError(f"max_new_tokens must be from 1 to {MAX_NEW_TOKENS}; got {max_new_tokens}")
        with torch.inference_mode(), model_errors("generation"):
            output = self.model.generate(**inputs, do_sample=False, num_beams=1, max_new_tokens=max_new_tokens)
        new = output[0, inputs["input_ids"].shape[1] :].tolist()
        stops = set(end_tokens(self.model, self.tokenizer))
        end = next((index for index, token in enumerate(new) if token in stops), len(new))
        return new[:end]

    def record(
        self, inputs: dict[str, torch.Tensor], rows: torch.Tensor, image_positions: np.ndarray, keep_rows: bool = False
    ) -> tuple[Recording, torch.Tensor]:
        """One forward pass of the whole sequence (no cache), recording the attention of the query ``rows`` in every
        language-model layer; returns the recording and the logits at ``rows`` (float32, (R, vocab))."""
        layers = {id(module): index for index, module in enumerate(self.attention_modules)}
        positions = torch.as_tensor(image_positions, dtype=torch.long)
        record = Recording(rows, positions, layers, sink_position(image_positions), keep_rows)
        length = inputs["input_ids"].shape[1]
        keep = length - int(rows.min()) if rows.numel() else 1
        with torch.inference_mode(), recording(record), model_errors("the recorded pass"):
            output = self.model(**inputs, use_cache=False, logits_to_keep=keep)
        missing = record.missing_layers()
        if missing:
            raise VLMError(
                f"the attention of layers {', '.join(map(str, missing))} of {type(self.model).__name__} did not pass "
                "through transformers' attention interface, so it cannot be recorded"
            )
        logits = output.logits[0, rows - (length - keep)].float() if rows.numel() else output.logits[0, :0].float()
        return record, logits


@contextlib.contextmanager
def model_errors(what: str) -> Iterator[None]:
    """A library's error inside the model (out of memory, a shape the family cannot take) as one VLMError line."""
    try:
        yield
    except VLMError:
        raise
    except (RuntimeError, ValueError, IndexError, TypeError) as error:
        raise VLMError(f"the model failed in {what}: {type(error).__name__}: {error}") from None


def sink_position(image_positions: np.ndarray) -> int:
    """The first position that holds no image token: the attention sink whose share ``Answer.first_share`` is."""
    taken = set(np.asarray(image_positions).tolist())
    return next(index for index in itertools.count() if index not in taken)


def image_token_id(config: Any, tokenizer: Any) -> int:
    """The id that marks image tokens: the config's, which must be a token of the tokenizer."""
    token_id = getattr(config, "image_token_id", None)
    if token_id is None:
        token_id = getattr(config, "image_token_index", None)
    if not isinstance(token_id, int) or not 0 <= token_id < len(tokenizer):
        raise VLMError(f"the config's image token id {token_id!r} is not a token of the tokenizer ({len(tokenizer)})")
    return token_id


def end_tokens(model: torch.nn.Module, tokenizer: Any) -> list[int]:
    """The ids that end an answer: the generation config's end-of-sequence ids, else the tokenizer's."""
    ends = getattr(model.generation_config, "eos_token_id", None)
    if ends is None:
        ends = tokenizer.eos_token_id
    return [ends] if isinstance(ends, int) else [int(e) for e in ends or []]


def as_photo(image: Any) -> Image.Image:
    """An RGB PIL image from a PIL image, an (H, W, 3) uint8 array, or a file path (read by vitviz's safe loader)."""
    from vitviz.preprocessing import ImageError, load_image

    if isinstance(image, (str, Path)):
        try:
            return load_image(Path(image).read_bytes())
        except (OSError, ImageError) as error:
            raise VLMError(f"the image {str(image)[:200]} cannot be read: {error}") from None
    if isinstance(image, np.ndarray):
        if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
            raise VLMError(f"an image array must be (height, width, 3) uint8; got {image.shape} {image.dtype}")
        image = Image.fromarray(image)
    if not isinstance(image, Image.Image):
        raise VLMError(f"the image must be a PIL image, an array or a path, not {type(image).__name__}")
    return image.convert("RGB")
