"""The one folder walk (vitviz.preprocessing.image_files): every command, the index's folder source and SAE
training find the same images in a folder."""

from pathlib import Path

from vitviz.preprocessing import image_files


def test_images_in_sub_folders_sorted_any_case_without_hidden_files(tmp_path):
    for name in ["b/2.PNG", "a/1.jpg", "c.jpeg", "a/.hidden.jpg", "._c.jpg", "notes.txt", "d.webp/inside.txt"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "folder.png").mkdir()  # a folder with an image's name is not an image
    found = [p.relative_to(tmp_path).as_posix() for p in image_files(tmp_path)]
    assert found == ["a/1.jpg", "b/2.PNG", "c.jpeg"]


def test_an_empty_or_missing_folder_has_no_images(tmp_path):
    assert image_files(tmp_path) == []
    assert image_files(Path(tmp_path) / "missing") == []
