"""The images of a session: uploads, camera shots, earlier images, and sample images from a local CIFAR-10 zip."""

from __future__ import annotations

import os
from pathlib import Path

import streamlit as st

from vitviz.preprocessing import ImageError, ImageFile
from vitviz_dashboard.cache.budget import session_share
from vitviz_dashboard.cache.pictures import decode, sample_images
from vitviz_dashboard.state import CAMERA_SHOTS, HISTORY, INTAKE, NEWEST

UPLOAD_TYPES = ["jpg", "jpeg", "png", "webp", "bmp", "gif", "tif", "tiff"]
MAX_SESSION_IMAGES = (
    20  # images a session keeps for revisiting and comparing (and at most budget.session_share() bytes)
)
ROOT = Path(__file__).resolve().parent.parent


EXAMPLES = Path(__file__).resolve().parent / "examples"  # public-domain and CC0 photos, see examples/SOURCES.md


def sample_sources() -> tuple[Path, ...]:
    """Where the images offered before any upload come from: the bundled example photos, and a local copy of the
    CIFAR-10 test set if there is one. VITVIZ_SAMPLES (folders of images and zips, separated by os.pathsep, or
    empty for none) replaces the list. Read in every run (this module is imported once per server, app.py runs
    each time)."""
    if "VITVIZ_SAMPLES" in os.environ:
        return tuple(Path(p) for p in os.environ["VITVIZ_SAMPLES"].split(os.pathsep) if p)
    return (
        EXAMPLES,
        ROOT / "data" / "cifar10_test.zip",
        ROOT.parent / "shared" / "data" / "cifar10" / "cifar10_test.zip",
    )


def choose_image() -> tuple[str, dict[str, ImageFile]] | None:
    """Uploads, camera, earlier images of this session, or samples: (chosen name, every image by name)."""
    history = HISTORY.setdefault({})
    uploads = st.file_uploader("Upload photos", type=UPLOAD_TYPES, accept_multiple_files=True)
    with st.expander("Take a photo with the camera"):
        camera = st.camera_input("Camera", label_visibility="collapsed")
    # each camera shot gets a name of its own (the browser calls every shot image.jpg)
    shots = CAMERA_SHOTS.setdefault({})
    if camera is not None and camera.file_id not in shots:
        shots[camera.file_id] = f"camera photo {len(shots) + 1}.jpg"
    items = [(upload.name, upload) for upload in uploads or []]
    items += [(shots[camera.file_id], camera)] if camera is not None else []
    # each upload is read, hashed and decoded once, in the run it arrives; later runs reuse the outcome:
    # (its name among the session's images, "") or ("", why it was refused)
    earlier = INTAKE.get() or {}
    intake = {item.file_id: earlier.get(item.file_id) or take_in(name, item) for name, item in items}
    INTAKE.set(intake)  # only the files still in the widgets
    for name, item in items:
        if intake[item.file_id][1]:
            st.error(f"Could not read {name}: {intake[item.file_id][1]}")
    arrived = [intake[item.file_id][0] for _, item in items if item.file_id not in earlier]
    if any(arrived):  # the newest readable arrival is shown, wherever its widget lists it
        NEWEST.set([name for name in arrived if name][-1])
    samples = dict(sample_images(sample_sources()))
    options = list(history) + [f"sample: {name}" for name in samples]
    if not options:
        st.info(
            "Upload one or more photos (JPEG, PNG, WebP, BMP, GIF, TIFF) to see what the model predicts and "
            "where it looks: attention rollout, the attention of every layer and head, what any patch attends "
            "to, class-specific relevance, head statistics, prefix tokens and token norms, and faithfulness curves."
        )
        return None
    if not history:
        st.caption(
            "Showing sample photos (the examples are public domain or CC0). Upload your own above: they "
            "join the Image picker."
        )
    newest = NEWEST.get()
    index = options.index(newest) if newest in options else 0
    name = st.selectbox("Image", options, index=index, help="every image of this session stays here")
    images = history | {f"sample: {n}": file for n, file in samples.items()}
    return name, images


def take_in(name: str, upload) -> tuple[str, str]:
    """Read a new upload: add it to the session's images and return (its name there, ""), or return
    ("", why it was refused). Unreadable files are refused here, so they never reach an image picker
    and the others stay usable. A different file with a name already taken (phones call every photo
    image.jpg) gets a number: "image (2).jpg"."""
    return add_image(name, upload.getvalue())


def add_image(name: str, data: bytes) -> tuple[str, str]:
    """Add an image file's bytes to the session's images, as take_in does for an upload (the same checks and
    limits): (its name there, "") or ("", why it was refused). The Dataset page opens its images through this."""
    limit_mb = st.get_option("server.maxUploadSize")  # what Streamlit refuses in an upload before we see it
    if len(data) > limit_mb * 2**20:
        return "", f"the file is {len(data) / 2**20:.0f} MB; the largest image this page takes is {limit_mb} MB"
    file = ImageFile.of(data)
    try:
        decode(file)
    except ImageError as error:
        return "", str(error)
    history = HISTORY.setdefault({})
    stem, suffix = os.path.splitext(name)
    number = 2
    while name in history and history[name].key != file.key:
        name, number = f"{stem} ({number}){suffix}", number + 1
    history.pop(name, None)  # re-insert: newest last
    history[name] = file
    limit, dropped = session_share(), []
    # bound each session's memory in images and in bytes: drop the oldest, never the one just taken in
    while len(history) > 1 and (
        len(history) > MAX_SESSION_IMAGES or sum(len(f.data) for f in history.values()) > limit
    ):
        dropped.append(next(iter(history)))
        history.pop(dropped[-1])
    if dropped:
        st.toast(
            f"Dropped the oldest image{'s' if len(dropped) > 1 else ''} of this session ({', '.join(dropped)}): a "
            f"session keeps at most {MAX_SESSION_IMAGES} images and {limit / 2**20:.0f} MB."
        )
    return name, ""
