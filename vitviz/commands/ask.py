"""Ask a vision-language model about photos from the command line: `vitviz ask --help`.

    vitviz ask photos/ --model HuggingFaceTB/SmolVLM-256M-Instruct --question "What is in the picture?" --out ask/
    vitviz ask cat.jpg --model ./llava-folder --question "What animal is this?" --answer "A cat" --relevance --out ask/

For every image, a folder <out>/<image name>/ with:
  answer.json     the question, the answer, its tokens, and each token's share of attention per layer on the image,
                  the text and the first token (heads' mean)
  attention.npz   image_attention (tokens, layers, heads, image tokens), image_token_grid (tile, row, col), the
                  tiles' boxes in the photo, grids and names (and with --relevance, relevance (tokens, image tokens))
  token_NNN_<token>.png   each answer token's attention (every layer, heads' mean) drawn over the photo, where each
                  tile's pixels came from; all_tokens.png the mean over the answer
  relevance_NNN_<token>.png   with --relevance: Chefer et al.'s relevance of each token over the photo
  Each picture is the photo at its own size with a strip below it: what the map shows (the token by its index and
  text), the colours, and the values of their two ends.

The images are read before the model loads: unreadable ones (and later images the processor rejects) are reported in
one line each and skipped, and the exit status is 1 if any were; when none can be read, the model is not loaded. An
image's folder is written whole or not at all: into a hidden folder beside it, renamed when complete. See docs/vlm.md.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from tqdm import tqdm

from vitviz.commands.common import find_images
from vitviz.commands.explain import _unique_name as unique_name
from vitviz.preprocessing import ImageError, load_image
from vitviz.render.answers import (
    answer_arrays,
    answer_record,
    map_picture,
    map_raster,
    readable_text,
    tile_name,
    token_name,
)
from vitviz.render.overlays import COLORMAPS
from vitviz.vlm import VLM, VLMError, image_relevance, load_vlm, token_attention
from vitviz.vlm.loading import PRECISIONS
from vitviz.vlm.model import MAX_NEW_TOKENS, MAX_QUESTION_CHARS


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vitviz ask", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("images", nargs="+", type=Path, help="image files and/or folders of images")
    p.add_argument(
        "--model",
        required=True,
        help="a folder saved with save_pretrained (model and processor), or a Hugging Face repository id: <org>/<name> "
        "(a local folder of that name wins) or hf:<org>/<name>",
    )
    p.add_argument("--question", required=True, help=f"the question (at most {MAX_QUESTION_CHARS:,} characters)")
    p.add_argument("--answer", help="an answer to teacher-force instead of generating one")
    p.add_argument(
        "--max-new-tokens", type=int, default=32, help=f"the longest generated answer, 1 to {MAX_NEW_TOKENS} tokens"
    )
    p.add_argument("--relevance", action="store_true", help="also Chefer et al.'s relevance of each answer token")
    p.add_argument("--precision", choices=PRECISIONS, help="fp32, bf16 or auto (default: as the weights are stored)")
    p.add_argument("--colormap", choices=COLORMAPS, default="inferno", help="overlay colours")
    p.add_argument("--alpha", type=float, default=0.5, help="overlay opacity in [0, 1]")
    p.add_argument("--out", type=Path, required=True, help="output folder")
    return p


def token_file(kind: str, index: int, token: str) -> str:
    """A file name for answer token ``index``: its number, then its letters and digits (the token "▁cat" gives
    token_002_cat.png)."""
    readable = re.sub(r"[^0-9A-Za-z]+", "", token)[:24]
    return f"{kind}_{index:03d}" + (f"_{readable}" if readable else "") + ".png"


def ask_image(vlm: VLM, path: Path, folder: Path, args: argparse.Namespace) -> str:
    """Ask about one image and write its folder; returns the answer's text. VLMError or ImageError when the image
    cannot be read or is rejected."""
    photo = load_image(path.read_bytes())
    answer = vlm.answer(photo, args.question, answer=args.answer, max_new_tokens=args.max_new_tokens)
    if not answer.token_ids:
        raise VLMError("the model answered with no token (the first token it generated ends the answer)")
    relevances = None
    if args.relevance:
        relevances = np.stack([image_relevance(answer, index) for index in range(len(answer.token_ids))])
    record = answer_record(answer, image=str(path), model=args.model)
    with written_whole(folder) as staging:
        (staging / "answer.json").write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
        np.savez_compressed(staging / "attention.npz", **answer_arrays(answer, relevances))

        tiles = tile_name(answer, None)
        where = f", {tiles}" if tiles else ""

        def draw(values: np.ndarray, name: str, label: str) -> None:
            picture = map_picture(photo, map_raster(answer, values), args.colormap, args.alpha, label + where)
            picture.save(staging / name)

        every = "every layer, the heads' mean"
        draw(token_attention(answer), "all_tokens.png", f"Attention of the whole answer, {every}")
        for index, token in enumerate(answer.tokens):
            name = token_name(answer, index)
            draw(token_attention(answer, index), token_file("token", index, token), f"Attention of {name}, {every}")
            if relevances is not None:
                draw(relevances[index], token_file("relevance", index, token), f"Relevance of {name} (Chefer et al.)")
    return answer.text


@contextmanager
def written_whole(folder: Path) -> Iterator[Path]:
    """A hidden folder beside ``folder`` to write into, renamed to ``folder`` (replacing an earlier run's) when the
    block ends, and deleted when it raises (Ctrl-C included): an image's folder is complete or absent."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".partial", dir=folder.parent))
    try:
        yield staging
        if folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder)
        staging.rename(folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def readable_images(paths: list[Path]) -> tuple[list[Path], list[str]]:
    """The images that decode (each read once here, before the model loads, and again when asked about), and one
    line for each that does not."""
    readable, failures = [], []
    for path in paths:
        try:
            load_image(path.read_bytes())
        except (ImageError, OSError) as error:
            failures.append(f"{path}: {error}")
            continue
        readable.append(path)
    return readable, failures


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 0 <= args.alpha <= 1:
        parser.error("--alpha must be in [0, 1]")
    if not 1 <= args.max_new_tokens <= MAX_NEW_TOKENS:
        parser.error(f"--max-new-tokens must be from 1 to {MAX_NEW_TOKENS}; got {args.max_new_tokens}")
    if not args.question.strip():
        parser.error("--question is empty: give the question to ask about each image")
    if len(args.question) > MAX_QUESTION_CHARS:
        parser.error(f"--question has {len(args.question):,} characters, more than the {MAX_QUESTION_CHARS:,} allowed")
    if args.answer is not None and not args.answer.strip():
        parser.error("--answer is empty: give the answer's text, or leave it out to generate one")
    found = find_images(args.images)
    paths, failures = readable_images(found)  # before the model loads: a wrong file is told at once
    if len(failures) == 1 == len(found):
        raise SystemExit(f"error: {failures[0]}")
    if not paths:
        for failure in failures:
            print(f"skipped {failure}", file=sys.stderr)
        raise SystemExit(f"error: none of the {len(found)} images can be read")
    try:
        vlm = load_vlm(args.model, args.precision)
    except VLMError as error:
        raise SystemExit(f"error: {error}") from None
    args.out.mkdir(parents=True, exist_ok=True)
    used, done = set(), 0
    try:
        for path in tqdm(paths, desc="asking", unit="image", disable=None, file=sys.stderr):
            folder = args.out / unique_name(path, used)
            try:
                text = ask_image(vlm, path, folder, args)
            except (VLMError, ImageError, OSError) as error:
                failures.append(f"{path}: {error}")
                continue
            except Exception as error:  # torch's own (out of memory ...), or a bug: one line, the others go on
                failures.append(f"{path}: {type(error).__name__}: {(str(error).splitlines() or [''])[0][:300]}")
                continue
            done += 1
            tqdm.write(f"{path.name}: {readable_text(text)}", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"error: stopped after {done} of {len(found)} images; their folders are in {args.out}", file=sys.stderr)
        return 130
    print(f"asked about {done} of {len(found)} images into {args.out}")
    for failure in failures:
        print(f"skipped {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
