"""The gallery (docs/gallery/) is current: drawn again, every picture is byte for byte the same."""

from __future__ import annotations

import html
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


def test_the_gallery_has_eight_architectures_three_ways_and_extras(gallery) -> None:
    from gallery_models import MODELS

    assert len(MODELS) == 8
    expected = {f"{name}{suffix}.svg" for name in MODELS for suffix in gallery.DRAWINGS}
    assert {p.name for p in GALLERY.iterdir()} == expected | set(gallery.EXTRAS)


@pytest.mark.needs("pinned_torch")
@pytest.mark.parametrize("name", ["resnet50", "unet", "bert", "gpt2", "llama", "vit", "mixtral",
                                  "t5"])
def test_the_gallery_is_current(gallery, name: str, tmp_path: Path) -> None:
    for path in gallery.draw(name, tmp_path):
        committed = GALLERY / path.name
        assert committed.read_bytes() == path.read_bytes(), (
            f"docs/gallery/{path.name} is stale: run python docs/gallery.py")


@pytest.mark.needs("pinned_torch")
@pytest.mark.parametrize("name", ["gpt2-diff.svg", "resnet50-flops.svg"])
def test_the_extra_pictures_are_current(gallery, name: str, tmp_path: Path) -> None:
    path = gallery.EXTRAS[name](tmp_path)
    assert (GALLERY / name).read_bytes() == path.read_bytes(), (
        f"docs/gallery/{name} is stale: run python docs/gallery.py {name}")


def test_the_extra_pictures_show_what_they_are_about() -> None:
    diff = (GALLERY / "gpt2-diff.svg").read_text(encoding="utf-8")
    assert "+ h.4: GPT2Block" in html.unescape(diff) and "33.1k → 49.6k params" in diff
    costs = html.unescape((GALLERY / "resnet50-flops.svg").read_text(encoding="utf-8"))
    assert "forward FLOPs" in costs and "costs: forward FLOPs · activations saved" in costs
