"""Ask a vision-language model about photos from the command line: `vitviz ask --help`.

    vitviz ask photos/ --model hf:HuggingFaceTB/SmolVLM-256M-Instruct --question "What is in the picture?" --out ask/
    vitviz ask cat.jpg --model ./llava-folder --question "What animal is this?" --answer "A cat" --relevance --out ask/

For every image, a folder <out>/<image name>/ with:
  answer.json     the question, the answer, its tokens, and each token's share of attention per layer on the image,
                  the text and the first token (heads' mean)
  attention.npz   image_attention (tokens, layers, heads, image tokens), image_token_grid (tile, row, col), the
                  tiles' boxes in the photo, grids and names (and with --relevance, relevance (tokens, image tokens))
  token_NNN_<token>.png   each answer token's attention (every layer, heads' mean) drawn over the photo, where each
                  tile's pixels came from; all_tokens.png the mean over the answer
  relevance_NNN_<token>.png   with --relevance: Chefer et al.'s relevance of each token over the photo

Unreadable images, and images the processor rejects, are reported in one line each and skipped; the exit status is
1 if any were. See docs/vlm.md.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np
from tqdm import tqdm

from vitviz.commands.common import find_images
from vitviz.commands.explain import _unique_name as unique_name
from vitviz.preprocessing import ImageError, load_image
from vitviz.render.answers import answer_arrays, answer_record, map_over_photo, map_raster
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
        "--model", required=True, help="a folder saved with save_pretrained (model and processor), or hf:<org>/<name>"
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
    folder.mkdir(parents=True, exist_ok=True)
    relevances = None
    if args.relevance:
        relevances = np.stack([image_relevance(answer, index) for index in range(len(answer.token_ids))])
    record = answer_record(answer, image=str(path), model=args.model)
    (folder / "answer.json").write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    np.savez_compressed(folder / "attention.npz", **answer_arrays(answer, relevances))

    def draw(values: np.ndarray, name: str) -> None:
        map_over_photo(photo, map_raster(answer, values), args.colormap, args.alpha).save(folder / name)

    draw(token_attention(answer), "all_tokens.png")
    for index, token in enumerate(answer.tokens):
        draw(token_attention(answer, index), token_file("token", index, token))
        if relevances is not None:
            draw(relevances[index], token_file("relevance", index, token))
    return answer.text


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not 0 <= args.alpha <= 1:
        parser.error("--alpha must be in [0, 1]")
    if not 1 <= args.max_new_tokens <= MAX_NEW_TOKENS:
        parser.error(f"--max-new-tokens must be from 1 to {MAX_NEW_TOKENS}; got {args.max_new_tokens}")
    if len(args.question) > MAX_QUESTION_CHARS:
        parser.error(f"--question has {len(args.question):,} characters, more than the {MAX_QUESTION_CHARS:,} allowed")
    if args.answer is not None and not args.answer.strip():
        parser.error("--answer is empty: give the answer's text, or leave it out to generate one")
    paths = find_images(args.images)
    try:
        vlm = load_vlm(args.model, args.precision)
    except VLMError as error:
        raise SystemExit(f"error: {error}") from None
    args.out.mkdir(parents=True, exist_ok=True)
    failures, used, done = [], set(), 0
    try:
        for path in tqdm(paths, desc="asking", unit="image", disable=None, file=sys.stderr):
            folder = args.out / unique_name(path, used)
            try:
                text = ask_image(vlm, path, folder, args)
            except (VLMError, ImageError, OSError) as error:
                failures.append(f"{path}: {error}")
                continue
            except RuntimeError as error:  # torch's own (out of memory ...): one line, the other images go on
                failures.append(f"{path}: {type(error).__name__}: {str(error).splitlines()[0][:300]}")
                continue
            done += 1
            tqdm.write(f"{path.name}: {text}", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"error: stopped after {done} of {len(paths)} images; their folders are in {args.out}", file=sys.stderr)
        return 130
    print(f"asked about {done} of {len(paths)} images into {args.out}")
    for failure in failures:
        print(f"skipped {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
