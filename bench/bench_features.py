"""What the Features tab costs: the patch features of 8 photos on DINOv2-B/14 at 224 (random weights), computed once,
then a joint PCA, a click-to-match answer and k-means parts from them, each beside the forward pass it needs.

    python bench/bench_features.py --out bench/results/features.json

Photos: the first 8 of ../shared/data/photos when it exists (a user's clone has none: then random images, which cost
the same). The model is timm's ``vit_base_patch14_reg4_dinov2`` built at 224 with random weights and converted with
``vitviz.from_timm``. Every figure is a median over --repeats runs, fp32, both cores.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import timm
import torch
from PIL import Image

import vitviz
from vitviz import explain
from vitviz.loading.sources.from_timm import preprocessing_from_timm
from vitviz.render import overlays
from vitviz.render.feature_pictures import paint_patches

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import median_seconds, parser, save

PHOTOS = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "photos"


def photos(count: int) -> list[Image.Image]:
    files = sorted(p for p in PHOTOS.glob("*") if p.suffix.lower() in {".jpg", ".jpeg", ".png"})[:count]
    if len(files) == count:
        return [Image.open(p).convert("RGB") for p in files]
    generator = torch.Generator().manual_seed(0)
    return [Image.fromarray((torch.rand(300, 400, 3, generator=generator) * 255).byte().numpy()) for _ in range(count)]


def main() -> None:
    args = parser(__doc__)
    args.add_argument("--repeats", type=int, default=7)
    args.add_argument("--images", type=int, default=8)
    args = args.parse_args()
    torch.manual_seed(0)
    original = timm.create_model("vit_base_patch14_reg4_dinov2", pretrained=False, img_size=224).eval()
    model = vitviz.from_timm(original)
    # DINOv2's own transform resizes to its training size, 518: the issue's figures are at 224, from 256 and a crop
    model.transform = dataclasses.replace(preprocessing_from_timm(original), resize=256, crop=224)
    images = photos(args.images)
    pixels = torch.cat([model.transform(image)[None] for image in images])  # (8, 3, 224, 224)
    grid = (pixels.shape[-2] // 14, pixels.shape[-1] // 14)

    def features(facet: str = "token", block: int = -1) -> list[torch.Tensor]:
        return list(explain.patch_features(model, pixels, block, facet))  # 8 x (256, 768)

    results = {
        "model": "vit_base_patch14_reg4_dinov2 at 224 (random weights)",
        "images": args.images,
        "source": "../shared/data/photos" if PHOTOS.exists() else "random images",
        "grid": grid,
        "threads": torch.get_num_threads(),
        "repeats": args.repeats,
    }
    with torch.inference_mode():
        model(pixels[:1])  # warm-up: the allocator and the kernels' first choice
        results["forward_8_images_s"] = median_seconds(lambda: model(pixels), args.repeats)
        results["features_8_images_s"] = median_seconds(features, args.repeats)
        results["features_8_images_key_s"] = median_seconds(lambda: features("key"), args.repeats)
        results["features_8_images_block_5_s"] = median_seconds(lambda: features("token", 5), args.repeats)  # 6 of 12
    tokens = features()
    results["joint_pca_s"] = median_seconds(lambda: explain.pca_rgb(tokens), args.repeats)
    results["joint_pca_foreground_s"] = median_seconds(lambda: explain.pca_rgb(tokens, foreground=0.5), args.repeats)

    def click() -> None:  # the tab's answer to a click: the similarity over two photos, the top 5 in each
        query = tokens[0][5 * grid[1] + 7]
        for features_of, exclude in ((tokens[0], 5 * grid[1] + 7), (tokens[1], None)):
            similarity = explain.patch_similarity(query, features_of)
            explain.top_matches(similarity, 5, grid, exclude=exclude, radius=1)

    results["click_to_match_s"] = median_seconds(click, args.repeats * 10)
    photo = images[0].copy()
    photo.thumbnail((1024, 1024))
    similarity = explain.patch_similarity(tokens[0][0], tokens[0]).reshape(grid).numpy()

    def click_pictures() -> None:  # and its two pictures: the map over the photo, the matches outlined
        for _ in range(2):
            picture = overlays.overlay(photo, similarity, "inferno", 0.55)
            for index in range(5):
                picture = overlays.mark_patch(picture, divmod(index, grid[1]), grid, colour=(0, 255, 0))

    results["click_pictures_s"] = median_seconds(click_pictures, args.repeats)
    results["kmeans_5_parts_s"] = median_seconds(lambda: explain.feature_clusters(tokens, 5), max(3, args.repeats // 2))
    colours = explain.pca_rgb(tokens).colours
    results["pca_pictures_s"] = median_seconds(
        lambda: [paint_patches(photo, colours[0].reshape(*grid, 3).numpy()) for _ in range(8)],
        args.repeats,
    )
    for name, value in results.items():
        print(f"{name}: {value * 1000:.1f} ms" if name.endswith("_s") else f"{name}: {value}")
    save(results, args.out)


if __name__ == "__main__":
    main()
