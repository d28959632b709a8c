"""Engine resolution, PNG caps, PDF, and the errors when an engine is missing or fails."""

from __future__ import annotations

import struct
import warnings

import pytest

import torchgraphrec as tgr
from helpers import fresh
from models import deep_mlp
from torchgraphrec.render import engine as engines
from torchgraphrec.render.engine import (EngineError, EngineFailure, EngineWarning, find_engines,
                                         resolve_engine, run_engine)

PURE = next(e for e in find_engines() if e.name == "graphviz-pure")
PDF_ENGINES = [e for e in find_engines() if "pdf" in e.formats]


@pytest.fixture
def only_pure(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine with graphviz-pure and nothing else."""
    monkeypatch.setattr(engines, "find_engines", lambda: (PURE,))
    monkeypatch.delenv("TORCHGRAPHREC_DOT", raising=False)


def test_graphviz_pure_is_found_through_package_metadata() -> None:
    assert PURE.path and PURE.path.endswith(("graphviz-pure", "graphviz-pure.exe"))
    assert "graphviz-pure" in PURE.version and "svg" in PURE.formats
    assert resolve_engine("svg").name == "graphviz-pure"


def test_pdf_without_an_engine_names_both_remedies(only_pure: None, tmp_path) -> None:
    recording = tgr.record(*fresh("mlp"))
    with pytest.raises(EngineError, match=r"system Graphviz.*\[pdf\] extra"):
        recording.render(tmp_path / "model.pdf")
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(not PDF_ENGINES, reason="neither system dot nor the [pdf] extra is installed")
def test_pdf_is_written_by_a_pdf_engine(tmp_path) -> None:
    path = tgr.record(*fresh("resnet_like")).render(tmp_path / "model.pdf")
    assert path.read_bytes().startswith(b"%PDF")


def test_explicit_engine_and_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_engine("svg", "graphviz-pure").name == "graphviz-pure"
    monkeypatch.setenv("TORCHGRAPHREC_DOT", PURE.path)
    assert resolve_engine("png").path == PURE.path
    with pytest.raises(EngineError, match="engine 'graphviz-pure' cannot write 'pdf'"):
        resolve_engine("pdf", "graphviz-pure")
    with pytest.raises(EngineError, match="engine 'no-such-dot' was not found"):
        resolve_engine("svg", "no-such-dot")


def test_engine_failure_is_reported_with_its_message() -> None:
    with pytest.raises(EngineError, match="graphviz-pure failed to write svg: .*syntax"):
        run_engine("digraph { a -> }", "svg", "graphviz-pure")


def _dying(tmp_path) -> str:
    script = tmp_path / "dying-dot"
    script.write_text("#!/bin/sh\nkill -9 $$\n")
    script.chmod(0o755)
    return str(script)


def test_a_failing_engine_hands_the_drawing_to_the_next_one(tmp_path) -> None:
    with pytest.warns(EngineWarning, match="dying-dot failed to write svg, so graphviz-pure "
                                           "drew it instead"):
        svg = run_engine("digraph { a }", "svg", _dying(tmp_path))
    assert svg.lstrip().startswith((b"<?xml", b"<svg"))


def test_when_no_engine_can_draw_it_the_dot_is_saved_for_a_bug_report(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engines, "find_engines", lambda: ())
    recording = tgr.record(*fresh("mlp"))
    target = tmp_path / "model.svg"
    with pytest.raises(EngineFailure, match=r"dying-dot failed to write svg: exit status -9\n"
                                            r"\(the drawing's DOT is saved in .*model\.svg\.dot"):
        recording.render(target, engine=_dying(tmp_path))
    assert not target.exists()
    assert (tmp_path / "model.svg.dot").read_text() == recording.to_dot()


#: graphviz-pure (and Graphviz 16, whose port it is) loses two edges here: an edge label
#: in a left-to-right drawing with nested clusters (minimised from BERT drawn with
#: ``depth=3, rankdir="LR", include_params=False``, which raised ``lost n0 n16 edge``).
LOST_EDGE = """digraph {
	rankdir=LR
	subgraph cluster_0 {
		n8 [label="embeddings.dropout: Dropout\\n1x8x32 -> 1x8x32" shape=box]
		subgraph cluster_2 {
			label="embeddings.word_embeddings: Embedding"
			n1
			n16
		}
	}
	n1 -> n18
	n3 -> n4
	n4 -> n19
	n5 -> n20
	n7 -> n9 [label=x4]
	n16 -> n1
	n18 -> n20
	n19 -> n5
	n21 -> n7
}
"""


@pytest.mark.xfail(strict=True, reason="graphviz-pure loses edges: lib/pathplan triangulation")
def test_graphviz_pure_draws_an_edge_label_beside_nested_clusters(only_pure: None) -> None:
    run_engine(LOST_EDGE, "svg", "graphviz-pure")


def test_an_engine_failure_says_nothing_of_character_widths(only_pure: None) -> None:
    labelled = LOST_EDGE.replace("1x8x32 -> 1x8x32", "1×8×32 → 1×8×32")
    with pytest.raises(EngineError, match="lost n3 n4 edge") as failed:
        run_engine(labelled, "svg")
    assert "no value for width" not in str(failed.value)


#: Four forwards of a generate() (Whisper's decoder, the encoder's output feeding each),
#: reduced: Graphviz's ranking fails on it ("trouble in init_rank").
RANKING_FAILS = """\
digraph G {
    subgraph cluster_3 {
        subgraph cluster_4 {
            subgraph cluster_5 {
                n30 [group=spine]
                n31 [group=spine]
                n32
            }
        }
    }
    subgraph cluster_6 {
        subgraph cluster_7 {
            subgraph cluster_8 {
                n44 [group=spine]
                n45
            }
        }
    }
    subgraph cluster_9 {
        subgraph cluster_10 {
            subgraph cluster_11 {
                n53
                n55
                n56
                n57 [group=spine]
            }
        }
    }
    subgraph cluster_12 {
        subgraph cluster_13 {
            subgraph cluster_14 {
                n63
                n69
            }
        }
    }
    n21 -> n30
    n21 -> n31
    n30 -> n31
    n30 -> n69
    n31 -> n44
    n31 -> n57
    n31 -> n70
    n42 -> n43
    n43 -> n44
    n44 -> n45
    n44 -> n57
    n52 -> n53 [label=reshape]
    n55 -> n56
    n56 -> n57
    n57 -> n58
    n58 -> n59
    n32 -> n37 [ltail=cluster_4 lhead=cluster_7]
    n45 -> n50 [ltail=cluster_7 lhead=cluster_10]
    n58 -> n63 [ltail=cluster_10 lhead=cluster_13]
}
"""


def test_a_drawing_graphviz_cannot_rank_is_ranked_as_a_whole(only_pure: None) -> None:
    with pytest.raises(EngineFailure, match="trouble in init_rank"):  # the engine's own
        engines._run_once(PURE, RANKING_FAILS, "svg", 60, [])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no other engine drew it
        svg = run_engine(RANKING_FAILS, "svg", "graphviz-pure").decode()
    assert svg.count('class="node"') == 20 and svg.count('class="cluster"') == 12


def test_bert_drawn_left_to_right_at_depth_3_draws() -> None:
    from transformers import BertConfig, BertModel

    import torch

    torch.manual_seed(0)
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=32)
    recording = tgr.record(BertModel(config).eval(), torch.randint(0, 100, (1, 8)))
    dot = recording.to_dot(depth=3, rankdir="LR", include_params=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engines, "find_engines", lambda: (PURE,))
        assert run_engine(dot, "svg").lstrip().startswith((b"<?xml", b"<svg"))


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_png_is_capped_in_size_and_says_so() -> None:
    recording = tgr.record(*deep_mlp(60, 4))
    # scaled down below the dpi asked for, silently: a paper's figure came out at 164 dpi
    with pytest.warns(EngineWarning, match="larger than a PNG holds .* less than dpi=96"):
        data = run_engine(recording.to_dot(fold_repeats=False), "png")
    width, height = _png_size(data)
    limit = engines.PNG_MAX_INCHES * 96
    assert height <= limit and width <= limit
    assert height > 0.9 * limit  # it was scaled down to the cap, not left huge or tiny
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a drawing within the cap: nothing to say
        run_engine(tgr.record(*deep_mlp(3, 4)).to_dot(), "png")


def test_doctor_lists_engines_and_formats() -> None:
    from torchgraphrec.commands import doctor_report

    report = "\n".join(doctor_report())
    assert "engine graphviz-pure: graphviz-pure - graphviz-pure version" in report
    assert "svg: written by graphviz-pure" in report
    assert ("pdf: written by" in report) == bool(PDF_ENGINES)
