"""The gallery (docs/gallery/) is current: drawn again, every picture is byte for byte the same."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GALLERY = ROOT / "docs" / "gallery"


@pytest.fixture(scope="module")
def gallery():
    sys.path.insert(0, str(ROOT / "docs"))  # the script imports its models module
    try:
        import gallery

        yield gallery
    finally:
        sys.path.remove(str(ROOT / "docs"))


def test_the_gallery_has_eight_architectures_three_ways(gallery) -> None:
    from gallery_models import MODELS

    assert len(MODELS) == 8
    expected = {f"{name}{suffix}.svg" for name in MODELS for suffix in gallery.DRAWINGS}
    assert {p.name for p in GALLERY.iterdir()} == expected


@pytest.mark.parametrize("name", ["resnet50", "unet", "bert", "gpt2", "llama", "vit", "mixtral",
                                  "t5"])
def test_the_gallery_is_current(gallery, name: str, tmp_path: Path) -> None:
    for path in gallery.draw(name, tmp_path):
        committed = GALLERY / path.name
        assert committed.read_bytes() == path.read_bytes(), (
            f"docs/gallery/{path.name} is stale: run python docs/gallery.py")
